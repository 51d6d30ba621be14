package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// replicaView is the figures replicas must agree on from /api/v1/overview.
type replicaView struct {
	Held             int    `json:"held"`
	Stuck            int    `json:"stuck"`
	Expirations5m    int64  `json:"expirations_5m"`
	ExpiredWorking5m int64  `json:"expired_working_5m"` // the "still working" mark
	Overlaps5m       int64  `json:"overlaps_5m"`
	Forced5m         int64  `json:"forced_5m"`
	Failures5m       int64  `json:"failures_5m"`
	Ingesting        bool   `json:"ingesting"`
	IngestError      string `json:"ingest_error"`
}

// overviewSeries is the overview's acquisitions series, as of at.
type overviewSeries struct {
	At     time.Time `json:"at"`
	Step   float64   `json:"series_step_seconds"`
	Acq    []float64 `json:"acquire_series"`
	Events int64     `json:"events_total"`
}

func seriesOf(ctx context.Context, p *proc) (overviewSeries, error) {
	var v overviewSeries
	return v, getJSONCtx(ctx, p.url("/api/v1/overview"), &v)
}

// seriesDisagree says where two replicas' acquisitions series, read in the
// same step, differ: a hole or a spike. Live or replayed, read at once or
// late, an event lands in the step of its own time (collector/state), so
// the replicas' steps are equal; the margin is for what the series count
// by the collector's clock. The newest step, still filling, is left out.
func seriesDisagree(a, b overviewSeries) string {
	var out []string
	for i := 0; i+1 < min(len(a.Acq), len(b.Acq)); i++ {
		x, y := a.Acq[i], b.Acq[i]
		if math.Abs(x-y) > 0.3*math.Max(x, y)+1 {
			out = append(out, fmt.Sprintf("step %d: %.1f/s vs %.1f/s", i, x, y))
		}
	}
	return strings.Join(out, "; ")
}

func viewOf(ctx context.Context, p *proc) (replicaView, error) {
	var v replicaView
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url("/api/v1/overview"), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET /api/v1/overview: %s", resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// TestTwoReplicasAndASIGKILLShowOneTruth runs what operators run: two serve
// replicas started with the same flags (only their listen ports differ, as
// on one host) under the demo's whole workload; one is killed with SIGKILL
// and restarted while the load goes on. Once the load stops and its leftover
// locks have expired, both must show the same picture as Redis: no phantom
// holder, no invented expiration, the same failures. Before each replica had
// its own group, the two split the stream and each invented hundreds of
// expirations.
func TestTwoReplicasAndASIGKILLShowOneTruth(t *testing.T) {
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := testCtx(t, 3*time.Minute)

	a := startServe(t, bin, srv.URL(), nil)
	b := startServe(t, bin, srv.URL(), nil)
	load := startLockscope(t, bin, nil, "load", "--redis", srv.URL(), "--key-prefix", "rep:",
		"--rate", "200", "--concurrency", "8", "--speed", "20", "--report-every", "0", "--log-level", "warn")

	// The workload has run through its scenarios' first crash, pause and
	// refusals (seen by both replicas) when b is killed.
	before := func(p *proc) bool {
		v, err := viewOf(ctx, p)
		return err == nil && v.Expirations5m > 0 && v.Failures5m > 0
	}
	if !redistest.Poll(ctx, func() bool { return before(a) && before(b) }) {
		t.Fatalf("the workload showed no expiration and refusal on both replicas")
	}
	b.kill(t)
	restart := time.Now()
	b = startServeOn(t, bin, srv.URL(), b.listen, nil) // the same replica: same host and port
	if !redistest.Poll(ctx, func() bool {
		resp, err := http.Get(b.url("/readyz"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("restarted replica not ready:\n%s", tail(b.out.String(), 3000))
	}
	t.Logf("restarted replica ready %v after its start", time.Since(restart).Round(time.Millisecond))
	// The restarted replica reads on: it applies what the load writes now.
	s0, err := seriesOf(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if !redistest.Poll(ctx, func() bool { s, err := seriesOf(ctx, b); return err == nil && s.Events > s0.Events+500 }) {
		t.Fatalf("the restarted replica applied nothing new:\n%s", tail(b.out.String(), 3000))
	}

	load.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-load.done:
	case <-time.After(30 * time.Second):
		t.Fatal("load did not stop within 30s of SIGTERM")
	}

	// Leftover locks (a crashed holder's) expire within seconds at --speed
	// 20; then Redis holds nothing of the load's, and both replicas must say
	// so and agree on everything else.
	var va, vb replicaView
	var agreeSince time.Time
	deadline := time.Now().Add(60 * time.Second)
	for {
		var errA, errB error
		va, errA = viewOf(ctx, a)
		vb, errB = viewOf(ctx, b)
		held, _ := rdb.Keys(ctx, "rep:*").Result()
		var locks int
		for _, k := range held {
			if rdb.Type(ctx, k).Val() == "string" {
				locks++
			}
		}
		agree := errA == nil && errB == nil && va == vb && locks == 0 && va.Held == 0
		switch {
		case !agree:
			agreeSince = time.Time{}
		case agreeSince.IsZero():
			agreeSince = time.Now()
		case time.Since(agreeSince) >= 2*time.Second:
			t.Logf("both replicas: %+v", va)
			if va.Expirations5m == 0 || va.Failures5m == 0 {
				t.Errorf("the workload's crashing holders and refused tries left expirations %d, failures %d: want some of each, or the check proves nothing", va.Expirations5m, va.Failures5m)
			}
			// The overview's acquisitions series: read in one step by both,
			// the restarted replica's has no hole where it was down and no
			// spike where it replayed.
			var sa, sb overviewSeries
			if !redistest.Poll(ctx, func() bool {
				var errA, errB error
				sa, errA = seriesOf(ctx, a)
				sb, errB = seriesOf(ctx, b)
				step := time.Duration(sa.Step * float64(time.Second))
				return errA == nil && errB == nil && step > 0 && sa.At.Truncate(step).Equal(sb.At.Truncate(step))
			}) {
				t.Fatal("could not read both replicas' series within one step")
			}
			if d := seriesDisagree(sa, sb); d != "" {
				t.Errorf("acquisitions series differ: %s\nreplica a: %v\nrestarted b: %v", d, sa.Acq, sb.Acq)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s: replica a shows %+v (%v), the restarted b %+v (%v), Redis holds %d locks of the load; want them equal, with nothing held\nrecent events on a:\n%s\nrecent events on b:\n%s",
				va, errA, vb, errB, locks, expiredByKey(ctx, a), expiredByKey(ctx, b))
		}
		redistest.Sleep(ctx, 200*time.Millisecond) // the poll's pace, not a guess at a duration
	}
}

// expiredByKey lists, for the keys whose holds expire in the workload, the
// expired records of each key's recent events.
func expiredByKey(ctx context.Context, p *proc) string {
	var out []string
	for _, k := range []string{"rep:invoice:batch-1", "rep:invoice:batch-2", "rep:invoice:batch-3",
		"rep:ledger:account-500", "rep:ledger:account-501", "rep:ledger:account-502", "rep:ledger:account-503", "rep:ledger:account-504"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url("/api/v1/locks/"+url.PathEscape(k)), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error()
		}
		var d struct {
			Recent []struct {
				Type  string    `json:"type"`
				Owner string    `json:"owner"`
				Lease string    `json:"lease"`
				At    time.Time `json:"at"`
			} `json:"recent"`
		}
		json.NewDecoder(resp.Body).Decode(&d)
		resp.Body.Close()
		var evs []string
		for _, e := range d.Recent {
			evs = append(evs, e.At.Format("05.000")+" "+e.Type+" "+e.Owner+" "+e.Lease)
		}
		out = append(out, k+":\n    "+strings.Join(evs, "\n    "))
	}
	return strings.Join(out, "\n")
}

package reliability

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// loggedOverlap is the workload's ground truth: an overlap it caused, as
// `lockscope load --log-format json` logs it.
type loggedOverlap struct {
	Msg           string `json:"msg"`
	Key           string `json:"key"`
	First, Second string
	Start, End    time.Time
	Fenced        bool
}

// overlapsLogged returns the overlaps the load's output logs.
func overlapsLogged(out string) []loggedOverlap {
	var got []loggedOverlap
	for _, line := range bytes.Split([]byte(out), []byte("\n")) {
		var v loggedOverlap
		if json.Unmarshal(line, &v) == nil && v.Msg == "workload: overlap" {
			got = append(got, v)
		}
	}
	return got
}

// overlapMatchSlack is how far apart the workload's clock readings and the
// events' times may be: the workload reads the clock around the calls, the
// library when it records the events.
const overlapMatchSlack = 50 * time.Millisecond

func matches(o loggedOverlap, in overlapJSON) bool {
	near := func(a, b time.Time) bool { return a.Sub(b).Abs() <= overlapMatchSlack }
	return slices.Contains(in.Keys, o.Key) && slices.Equal(in.Owners, []string{o.First, o.Second}) && in.End != nil &&
		near(in.Start, o.Start) && near(*in.End, o.End)
}

// TestOverlapsOfALoadRunAreTheWorkloadsOwn measures precision and recall on
// a run of `lockscope load` with every scenario (pauses past the TTL, half
// of whose holders work on after the thaw; crashed holders; hung ones;
// clean hand-offs by the thousand): every overlap the workload's own log
// knows of is reported by serve (key, both owners, its window), and no
// other. Set LOCKSCOPE_OVERLAP_RUN to a duration for a longer run, and
// LOCKSCOPE_OVERLAP_SPEED for another --speed (5: TTLs of 400 ms).
func TestOverlapsOfALoadRunAreTheWorkloadsOwn(t *testing.T) {
	run, speed := 45*time.Second, "5"
	if d, err := time.ParseDuration(os.Getenv("LOCKSCOPE_OVERLAP_RUN")); err == nil && d > 0 {
		run = d
	}
	if v := os.Getenv("LOCKSCOPE_OVERLAP_SPEED"); v != "" {
		speed = v
	}
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := testCtx(t, run+3*time.Minute)
	serve := startServe(t, bin, srv.URL(), nil)
	load := startLockscope(t, bin, nil, "load", "--redis", srv.URL(), "--key-prefix", "ov:", "--rate", "100", "--concurrency", "4",
		"--speed", speed, "--duration", run.String(), "--report-every", "0", "--log-level", "info", "--log-format", "json")
	select {
	case <-load.done:
	case <-ctx.Done():
		t.Fatal("load did not end")
	}
	truth := overlapsLogged(load.out.String())
	if len(truth) == 0 {
		t.Fatalf("the load logged no overlap: the measurement proves nothing\n%s", tail(load.out.String(), 2000))
	}

	// serve decides an overlap when its first holder's last word is in, or
	// its lease's deadline plus one TTL has passed: wait until it reports
	// every one the workload knows of, or the context ends.
	var reported []overlapJSON
	found := func() int {
		var v struct {
			Incidents []overlapJSON `json:"incidents"`
		}
		if getJSONCtx(ctx, serve.url("/api/v1/incidents?limit=1000"), &v) != nil {
			return -1
		}
		reported = reported[:0]
		for _, in := range v.Incidents {
			if in.Kind == "overlap" {
				reported = append(reported, in)
			}
		}
		n := 0
		for _, o := range truth {
			if slices.ContainsFunc(reported, func(in overlapJSON) bool { return matches(o, in) }) {
				n++
			}
		}
		return n
	}
	redistest.Poll(ctx, func() bool { return found() == len(truth) })
	hit := found()
	var missed, extra []string
	for _, o := range truth {
		if !slices.ContainsFunc(reported, func(in overlapJSON) bool { return matches(o, in) }) {
			missed = append(missed, fmt.Sprintf("%s %s→%s %s..%s", o.Key, o.First, o.Second, o.Start.Format("05.000"), o.End.Format("05.000")))
		}
	}
	for _, in := range reported {
		if !slices.ContainsFunc(truth, func(o loggedOverlap) bool { return matches(o, in) }) {
			extra = append(extra, fmt.Sprintf("%s %v %s %s..%v (%s)", in.Keys, in.Owners, in.Cause, in.Start.Format("05.000"), in.End, in.EndedBy))
		}
	}
	fenced := 0
	for _, in := range reported {
		fenced += in.WritesRefused
	}
	t.Logf("load run %v at --speed %s: the workload logged %d overlaps, serve reported %d: %d matched (recall %.2f, precision %.2f); stale writes refused by fencing: %d",
		run, speed, len(truth), len(reported), hit, float64(hit)/float64(len(truth)), float64(hit)/float64(max(len(reported), 1)), fenced)
	if len(missed) > 0 {
		t.Errorf("overlaps the workload caused that serve did not report:\n%s", strings.Join(missed, "\n"))
	}
	if len(extra) > 0 {
		t.Errorf("overlaps serve reported that the workload did not cause:\n%s", strings.Join(extra, "\n"))
	}
}

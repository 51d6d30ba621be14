package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// totals parses the key=value counters of the line of out starting with
// prefix ("total:", "events:").
func totals(t *testing.T, out, prefix string) map[string]int64 {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		m := map[string]int64{}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("line %q: %s is not a count", line, kv)
			}
			m[k] = n
		}
		return m
	}
	t.Fatalf("no %q line in output:\n%s", prefix, out)
	return nil
}

// metricSum adds up every sample of the metric name in a Prometheus text
// exposition.
func metricSum(body, name string) (float64, bool) {
	sum, found := 0.0, false
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		sum, found = sum+v, true
	}
	return sum, found
}

type overview struct {
	AcquireRate float64 `json:"acquire_rate"`
	EventsTotal int64   `json:"events_total"`
	TrackedKeys int     `json:"tracked_keys"`
	Ingesting   bool    `json:"ingesting"`
}

func getOverview(base string) (overview, error) {
	var o overview
	code, body, err := get(context.Background(), base+"/api/v1/overview")
	if err != nil {
		return o, err
	}
	if code != 200 {
		return o, fmt.Errorf("GET /api/v1/overview: %d %s", code, body)
	}
	return o, json.Unmarshal([]byte(body), &o)
}

var rateLine = regexp.MustCompile(`(?m)^\s*\d+(\.\d+)?m?s\s+attempts=\d+\.\d/s acquired=\d+\.\d/s refused=`)

func TestServeShowsLoad(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	addr := freeAddr(t)
	base := "http://" + addr
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_STREAM=load:events"}
	serve := start(t, append(env, "LOCKSCOPE_LISTEN="+addr), "serve")
	redistest.WaitFor(t, 15*time.Second, "/readyz to answer 200", func() error {
		code, body, err := get(context.Background(), base+"/readyz")
		if err != nil || code != 200 {
			return fmt.Errorf("GET /readyz = %d %q, %v; want 200", code, body, err)
		}
		return nil
	})

	stdout, stderr, code := lockscope(t, env, "", "load", "--duration", "3s", "--rate", "150", "--concurrency", "8",
		"--speed", "10", "--report-every", "1s")
	if code != 0 {
		t.Fatalf("lockscope load: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if n := len(rateLine.FindAllString(stdout, -1)); n < 2 {
		t.Errorf("load printed %d rate lines, want at least 2:\n%s", n, stdout)
	}
	tot, evs := totals(t, stdout, "total:"), totals(t, stdout, "events:")
	if tot["acquired"] < 100 || evs["dropped"] != 0 || evs["sent"] != evs["recorded"] {
		t.Fatalf("load totals %v, events %v: want >= 100 acquired and every event sent", tot, evs)
	}

	// The collector counts exactly what the load did.
	redistest.WaitFor(t, 15*time.Second, "the load's events in /metrics", func() error {
		_, body, err := get(context.Background(), base+"/metrics")
		if err != nil {
			return err
		}
		acq, _ := metricSum(body, "lockscope_acquisitions_total")
		ev, _ := metricSum(body, "lockscope_events_total")
		if int64(acq) != tot["acquired"] || int64(ev) != evs["sent"] {
			return fmt.Errorf("/metrics: acquisitions %v, events %v; want %d and %d", acq, ev, tot["acquired"], evs["sent"])
		}
		return nil
	})
	o, err := getOverview(base)
	if err != nil || o.EventsTotal != evs["sent"] || o.AcquireRate <= 0 || o.TrackedKeys == 0 || !o.Ingesting {
		t.Errorf("overview = %+v, %v; want %d events, a positive acquire rate, tracked keys, ingesting", o, err, evs["sent"])
	}
	code, body, err := get(context.Background(), base+"/")
	if err != nil || code != 200 || !strings.Contains(body, "inventory:sku-") {
		t.Errorf("GET / = %d, %v; want 200 with the hot inventory keys", code, err)
	}

	serve.signal(syscall.SIGTERM)
	if code := serve.wait(20 * time.Second); code != 0 {
		t.Errorf("serve after SIGTERM: exit %d, want 0", code)
	}
	if _, _, err := get(context.Background(), base+"/healthz"); err == nil {
		t.Errorf("GET /healthz after shutdown succeeded, want the listener closed")
	}
}

func TestDemoWithoutRedis(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	base := "http://" + addr
	started := time.Now()
	// Speed 10 and a 1s stuck threshold tell the demo's whole story in
	// seconds: the hung export worker, the crashed batch, the paused sync.
	demo := start(t, nil, "demo", "--listen", addr, "--speed", "10", "--stuck-after", "1s")
	var o overview
	redistest.WaitFor(t, 10*time.Second, "the demo's overview", func() error {
		code, body, err := get(context.Background(), base+"/")
		if err != nil || code != 200 || !strings.Contains(body, "lockscope") {
			return fmt.Errorf("GET / = %d, %v", code, err)
		}
		if o, err = getOverview(base); err != nil || o.AcquireRate <= 0 || o.EventsTotal == 0 {
			return fmt.Errorf("overview = %+v, %v; want live acquisitions", o, err)
		}
		return nil
	})
	t.Logf("demo live after %v: %+v", time.Since(started).Round(time.Millisecond), o)
	out := demo.stdout.String()
	if !strings.Contains(out, "dashboard "+base+"/") || !strings.Contains(out, "operator login for forced releases: demo / ") {
		t.Errorf("demo output lacks the URL or the operator login:\n%s", out)
	}
	// The embedded Redis is a real one to the operator commands.
	embedded := regexp.MustCompile(`embedded Redis (redis://127\.0\.0\.1:\d+)`).FindStringSubmatch(out)
	if embedded == nil {
		t.Fatalf("demo output names no embedded Redis:\n%s", out)
	}
	redistest.WaitFor(t, 10*time.Second, "an editing session on the demo's Redis", func() error {
		stdout, stderr, code := lockscope(t, []string{"LOCKSCOPE_REDIS_URL=" + embedded[1]}, "", "locks", "--json", "workflow:*")
		var held []struct{ Key, Owner string }
		if err := json.Unmarshal([]byte(stdout), &held); code != 0 || err != nil || len(held) == 0 ||
			!strings.HasPrefix(held[0].Owner, "workflow-editor/") {
			return fmt.Errorf("locks on the demo's Redis: exit %d, %v, %+v; want an editing session\n%s%s", code, err, held, stdout, stderr)
		}
		return nil
	})

	redistest.WaitFor(t, 15*time.Second, "a stuck, an expired and a lost lock in /metrics", func() error {
		_, body, err := get(context.Background(), base+"/metrics")
		if err != nil {
			return err
		}
		stuck, _ := metricSum(body, "lockscope_stuck_locks")
		expired, _ := metricSum(body, "lockscope_expirations_total")
		lost, _ := metricSum(body, `lockscope_events_total{type="lost"}`)
		if stuck < 1 || expired < 1 || lost < 1 {
			return fmt.Errorf("demo metrics: stuck %v, expirations %v, lost events %v; want each >= 1", stuck, expired, lost)
		}
		return nil
	})

	demo.signal(syscall.SIGINT)
	if code := demo.wait(20 * time.Second); code != 0 {
		t.Errorf("demo after SIGINT: exit %d, want 0", code)
	}
}

func TestLoadFlushesEventsOnSIGTERM(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	const stream = "sigterm:events"
	p := start(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_STREAM=" + stream},
		"load", "--rate", "300", "--speed", "10", "--report-every", "500ms")
	redistest.WaitFor(t, 15*time.Second, "two rate lines", func() error {
		if n := len(rateLine.FindAllString(p.stdout.String(), -1)); n < 2 {
			return fmt.Errorf("%d rate lines", n)
		}
		return nil
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(20 * time.Second); code != 0 {
		t.Fatalf("load after SIGTERM: exit %d, want 0", code)
	}
	out := p.stdout.String()
	tot, evs := totals(t, out, "total:"), totals(t, out, "events:")
	if evs["dropped"] != 0 || evs["sent"] != evs["recorded"] {
		t.Fatalf("events %v: want every recorded event sent", evs)
	}
	got := redistest.ReadStream(t, rdb, stream).Events
	acquired := 0
	for _, e := range got {
		if e.Type == event.Acquired {
			acquired++
		}
	}
	if int64(len(got)) != evs["sent"] || int64(acquired) != tot["acquired"] {
		t.Errorf("stream has %d events, %d acquired; load reported %d sent, %d acquired", len(got), acquired, evs["sent"], tot["acquired"])
	}
	// What the load held it released on the way out; only the crashed
	// batch's lock is left to expire.
	lc := lock.New(rdb, nil)
	keys, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		// Not locks: the stream, fence counters, the fence guards' marks and
		// the data the workload's ledger syncs write.
		if k == stream || strings.HasPrefix(k, lock.FencePrefix) || strings.HasPrefix(k, lock.GuardPrefix) || strings.HasPrefix(k, "lockscope:workload:") {
			continue
		}
		h, err := lc.Inspect(context.Background(), k)
		if err == nil && !strings.HasPrefix(h.Owner, "billing-batch/") {
			t.Errorf("after SIGTERM %s is still held by %s, want it released", k, h.Owner)
		}
	}
}

func TestServeForcedReleaseFromTheAPI(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	addr := freeAddr(t)
	base := "http://" + addr
	const stream = "ops:events"
	start(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_LISTEN=" + addr, "LOCKSCOPE_STREAM=" + stream,
		"LOCKSCOPE_OPERATOR_TOKEN=s3cret-token-0123"}, "serve")
	redistest.WaitFor(t, 15*time.Second, "/readyz to answer 200", func() error {
		if code, _, err := get(context.Background(), base+"/readyz"); err != nil || code != 200 {
			return fmt.Errorf("GET /readyz = %d, %v", code, err)
		}
		return nil
	})

	lc := lock.New(rdb, nil)
	const key = "export:tenant-9"
	// Renewed every second: a loaded host keeps it until the forced release.
	lease, err := lc.Obtain(context.Background(), key, 3*time.Second, &lock.ObtainOptions{AutoRenew: true, Owner: "export-worker/pod-2"})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	h, err := lc.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	post := func(token string) (int, string) { return apiRelease(t, base, key, h.Fingerprint, "hung export", token) }
	if code, body := post(""); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("release without the token: %d %s, want 401 or 403", code, body)
	}
	if code, body := post("s3cret-token-0123"); code != 200 {
		t.Fatalf("release with the token: %d %s, want 200", code, body)
	}
	select {
	case <-lease.Done():
		if !errors.Is(lease.Err(), lock.ErrLost) {
			t.Errorf("lease.Err() = %v, want ErrLost", lease.Err())
		}
	case <-time.After(30 * time.Second):
		t.Error("the holder's lease did not notice the forced release within 30s (it renews every second)")
	}
	redistest.WaitFor(t, 10*time.Second, "the forced event on the stream", func() error {
		var forced []event.Event
		for _, e := range redistest.ReadStream(t, rdb, stream).Events {
			if e.Type == event.Forced {
				forced = append(forced, e)
			}
		}
		if len(forced) != 1 || forced[0].Key != key || forced[0].Owner != "export-worker/pod-2" || forced[0].Reason != "hung export" {
			return fmt.Errorf("forced events in the stream: %+v; want the one release", forced)
		}
		_, body, err := get(context.Background(), base+"/metrics")
		if n, _ := metricSum(body, "lockscope_forced_releases_total"); err != nil || n != 1 {
			return fmt.Errorf("lockscope_forced_releases_total = %v, %v; want 1", n, err)
		}
		return nil
	})
}

func TestDemoOnARealRedisStopsAfterDuration(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	addr := freeAddr(t)
	demo := start(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_LOAD_DURATION=3s", "LOCKSCOPE_LISTEN=" + addr}, "demo")
	var o overview
	redistest.WaitFor(t, 10*time.Second, "the demo's events", func() error {
		var err error
		if o, err = getOverview("http://" + addr); err != nil || o.EventsTotal == 0 {
			return fmt.Errorf("overview = %+v, %v; want events", o, err)
		}
		return nil
	})
	if code := demo.wait(20 * time.Second); code != 0 {
		t.Fatalf("demo --duration 3s: exit %d, want 0", code)
	}
	if !strings.Contains(demo.stdout.String(), "Redis "+srv.URL()) {
		t.Errorf("demo output does not name the Redis it uses:\n%s", demo.stdout)
	}
	if n := rdb.XLen(context.Background(), event.DefaultStream).Val(); n == 0 {
		t.Errorf("XLEN %s = 0 after the demo, want its events", event.DefaultStream)
	}
}

// A replica never exports a last-event time of 0 (which read as a stream
// silent since 1970 and set LockscopeEventsStale pending): while it knows no
// event the series is absent, and a restarted one gives, from its first
// answer to /metrics, the newest event it rebuilt or nothing.
func TestRestartedServeNeverExportsAZeroLastEvent(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	addr := freeAddr(t)
	base := "http://" + addr
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_STREAM=restart:events", "LOCKSCOPE_LISTEN=" + addr, "LOCKSCOPE_REPLICA=r1"}
	lastEvent := func() (float64, bool, error) {
		code, body, err := get(context.Background(), base+"/metrics")
		if err != nil || code != 200 {
			return 0, false, fmt.Errorf("GET /metrics = %d, %v", code, err)
		}
		v, found := metricSum(body, "lockscope_last_event_timestamp_seconds")
		return v, found, nil
	}
	serve := start(t, env, "serve")
	redistest.WaitFor(t, 15*time.Second, "/metrics", func() error { _, _, err := lastEvent(); return err })
	for range 3 { // an empty stream: no event known
		if v, found, err := lastEvent(); err != nil || found {
			t.Fatalf("before any event: lockscope_last_event_timestamp_seconds = %v (found %v), %v; want absent, not 0", v, found, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, stderr, code := lockscope(t, env, "", "load", "--duration", "2s", "--rate", "50", "--concurrency", "4", "--speed", "10"); code != 0 {
		t.Fatalf("lockscope load: exit %d\n%s", code, stderr)
	}
	var before float64
	redistest.WaitFor(t, 15*time.Second, "a last-event time before the restart", func() error {
		v, found, err := lastEvent()
		if err != nil || !found || v <= 0 {
			return fmt.Errorf("lockscope_last_event_timestamp_seconds = %v (found %v), %v", v, found, err)
		}
		before = v
		return nil
	})
	serve.signal(syscall.SIGTERM)
	if code := serve.wait(20 * time.Second); code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d", code)
	}

	start(t, env, "serve")
	var scrapes, absent int
	redistest.WaitFor(t, 30*time.Second, "the restarted replica's last-event time", func() error {
		v, found, err := lastEvent()
		if err != nil {
			return err // not listening yet
		}
		scrapes++
		switch {
		case !found:
			absent++
			return errors.New("absent: the rebuild has applied no event yet")
		case v <= 0:
			t.Fatalf("scrape %d of the restarted replica: lockscope_last_event_timestamp_seconds %v, want absent or the newest event's time", scrapes, v)
		case v < before:
			return fmt.Errorf("last event %v, want the rebuilt %v", v, before)
		}
		return nil
	})
	t.Logf("restarted replica: %d scrapes, %d without the series, then the newest event's time", scrapes, absent)
}

package reliability

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockscope/lockscope/collector"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/dashboard"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// readyz asks the dashboard's /readyz, which serves the collector's Health.
func readyz(h http.Handler) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code, rec.Body.String()
}

// TestRedisRestartMidWorkload kills Redis (SIGKILL, nothing persisted) under
// a running workload, leaves it down for a moment and starts it again. Lock
// calls must fail within their deadlines while it is down and succeed after;
// leases renewing across the restart must learn they lost their lock; the
// emitter must report exactly what it dropped; the collector must go not
// ready, recreate its consumer group, and count every event written to the
// new stream exactly once; and nothing may be left running afterwards.
func TestRedisRestartMidWorkload(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	srv, err := redistest.New(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := testCtx(t, 60*time.Second)
	const stream = "lockscope:events"

	// Each component gets its own client, as in production.
	// A dial that ignored its context would wait 4 s while Redis is down
	// (5 tries a second apart): a late Obtain stands out by seconds, not by
	// a margin a loaded host could eat.
	appRDB := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialerRetryTimeout: time.Second})
	colRDB := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	em := lock.NewEmitter(appRDB, &lock.EmitterOptions{Stream: stream})
	client := lock.New(appRDB, &lock.Options{Owner: "app", Recorder: em})

	agg, reg := newAggregator(t, state.Config{})
	dash, err := dashboard.New(agg, lock.New(colRDB, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	colCtx, stopCollector := context.WithCancel(ctx)
	colDone := make(chan error, 1)
	go func() {
		colDone <- collector.New(colRDB, agg, &collector.Options{Stream: stream, Consumer: "c1", Logger: quietLog()}).Run(colCtx)
	}()
	// Ready once the group exists and the collector says so. Before Run
	// starts Health is nil too, so the group is checked first: once it
	// exists Run has started, and nil health then means ready.
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool {
		return len(colRDB.XInfoGroups(ctx, stream).Val()) == 1 && agg.Health() == nil
	}) {
		t.Fatalf("collector not ready: %v", agg.Health())
	}
	if code, body := readyz(dash); code != http.StatusOK {
		t.Fatalf("/readyz before the restart = %d %q, want 200", code, body)
	}

	// Health as /readyz serves it, sampled all along.
	var (
		healthMu    sync.Mutex
		healthTrail []string // "ready" / "not ready: ..." on each change
	)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		last := ""
		for sampleCtx.Err() == nil {
			code, body := readyz(dash)
			s := "ready"
			if code != http.StatusOK {
				s = strings.TrimSpace(body)
			}
			if s != last {
				healthMu.Lock()
				healthTrail = append(healthTrail, s)
				healthMu.Unlock()
				last = s
			}
			redistest.Sleep(sampleCtx, 10*time.Millisecond)
		}
	}()

	// The workload: workers obtain, hold briefly and release, each Obtain
	// with a 200ms deadline; plus leases renewing across the restart.
	const obtainDeadline, lateBound = 200 * time.Millisecond, time.Second
	var (
		wg                sync.WaitGroup
		okBefore, okAfter atomic.Int64
		failed, late      atomic.Int64
		restarted         atomic.Bool
		worst             atomic.Int64
		workCtx, stopWork = context.WithCancel(ctx)
		renewing          []*lock.Lease
		errSamples        sync.Map
	)
	for i := range 3 {
		l, err := client.Obtain(ctx, fmt.Sprintf("renewing:%d", i), 300*time.Millisecond, &lock.ObtainOptions{AutoRenew: true})
		if err != nil {
			t.Fatal(err)
		}
		renewing = append(renewing, l)
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; workCtx.Err() == nil; i++ {
				octx, cancel := context.WithTimeout(workCtx, obtainDeadline)
				start := time.Now()
				l, err := client.Obtain(octx, fmt.Sprintf("job:%d", i%8), time.Second, &lock.ObtainOptions{Retry: lock.LinearBackoff(10 * time.Millisecond)})
				took := time.Since(start)
				cancel()
				if took > time.Duration(worst.Load()) {
					worst.Store(int64(took))
				}
				if took >= lateBound {
					late.Add(1)
				}
				if err != nil {
					failed.Add(1)
					errSamples.LoadOrStore(w, err.Error())
					redistest.Sleep(workCtx, 10*time.Millisecond)
					continue
				}
				if restarted.Load() {
					okAfter.Add(1)
				} else {
					okBefore.Add(1)
				}
				redistest.Sleep(workCtx, 5*time.Millisecond)
				rctx, cancel := context.WithTimeout(ctx, obtainDeadline)
				l.Release(rctx)
				cancel()
			}
		}()
	}

	redistest.Sleep(ctx, 700*time.Millisecond)
	droppedBefore := em.Stats().Dropped
	srv.Stop()
	// Nothing more can reach the collector: what it counted now is all it
	// will ever get from the old stream (lost with Redis's memory).
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool { return agg.Health() != nil }) {
		t.Fatalf("collector still ready 10s after Redis died")
	}
	redistest.Sleep(ctx, 300*time.Millisecond) // let the applier finish the batch in hand
	countedBefore := gather(t, reg).sum("lockscope_events_total")
	failedWhileDown := failed.Load()
	redistest.Sleep(ctx, 700*time.Millisecond)
	failedWhileDown = failed.Load() - failedWhileDown
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	restarted.Store(true)

	// Recovery: locks, collector readiness.
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool { return okAfter.Load() >= 20 }) {
		t.Errorf("successful Obtains after the restart = %d within 10s, want >= 20", okAfter.Load())
	}
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool { return agg.Health() == nil }) {
		t.Errorf("collector not ready 10s after Redis came back: %v", agg.Health())
	}
	for i, l := range renewing {
		select {
		case <-l.Done():
			if !errors.Is(l.Err(), lock.ErrLost) {
				t.Errorf("renewing lease %d Err() after the restart = %v, want ErrLost", i, l.Err())
			}
		case <-time.After(5 * time.Second):
			t.Errorf("renewing lease %d not lost 5s after Redis restarted empty", i)
		}
	}
	redistest.Sleep(ctx, 500*time.Millisecond)
	stopWork()
	wg.Wait()

	// The emitter: flush, and its drops are reported in the new stream.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if err := em.Close(cctx); err != nil {
		t.Errorf("emitter Close after the restart: %v", err)
	}
	cancel()
	st := em.Stats()
	droppedInOutage := st.Dropped - droppedBefore
	read := redistest.ReadStream(t, colRDB, stream)
	evs, bad := read.Events, read.Malformed
	byType, reported := countTypes(evs)
	if droppedInOutage == 0 || reported != int64(droppedInOutage) {
		t.Errorf("dropped events in the new stream report %d drops, want Stats().Dropped delta %d (> 0)", reported, droppedInOutage)
	}
	if bad != 0 {
		t.Errorf("%d entries of the new stream do not decode", bad)
	}

	// The collector counts every event of the new stream exactly once.
	want := countedBefore + float64(len(evs))
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool { return gather(t, reg).sum("lockscope_events_total") >= want }) {
		t.Errorf("lockscope_events_total = %v, want %v (%v before + %d in the new stream)",
			gather(t, reg).sum("lockscope_events_total"), want, countedBefore, len(evs))
	}
	redistest.Sleep(ctx, 300*time.Millisecond)
	m := gather(t, reg)
	if got := m.sum("lockscope_events_total"); got != want {
		t.Errorf("lockscope_events_total = %v, want exactly %v (%v before + %d in the new stream)", got, want, countedBefore, len(evs))
	}
	if got := m.sum("lockscope_events_dropped_total"); got != float64(reported) {
		t.Errorf("lockscope_events_dropped_total = %v, want %d", got, reported)
	}
	if code, body := readyz(dash); code != http.StatusOK {
		t.Errorf("/readyz after recovery = %d %q, want 200", code, body)
	}

	stopSampling()
	<-sampled
	healthMu.Lock()
	trail := healthTrail
	healthMu.Unlock()
	if len(trail) < 3 || trail[0] != "ready" || trail[len(trail)-1] != "ready" || !strings.HasPrefix(trail[1], "not ready:") {
		t.Errorf("/readyz went %q, want ready, not ready (with the reason), ready", trail)
	}

	// Lock calls during the outage failed, and on time.
	if failedWhileDown == 0 {
		t.Errorf("no Obtain failed while Redis was down")
	}
	if n := late.Load(); n != 0 {
		t.Errorf("%d Obtains returned %v or more after they began, want by their %v deadline (worst %v)", n, lateBound, obtainDeadline, time.Duration(worst.Load()))
	}
	var samples []string
	errSamples.Range(func(_, v any) bool { samples = append(samples, v.(string)); return true })
	t.Logf("obtains ok before/after %d/%d, failed %d (%d while down), worst %v; emitter %+v; events %v (dropped reported %d); readyz %q; sample errors %q",
		okBefore.Load(), okAfter.Load(), failed.Load(), failedWhileDown, time.Duration(worst.Load()), st, byType, reported, trail, samples)

	// Close everything; nothing may be left running.
	stopCollector()
	select {
	case err := <-colDone:
		if err != nil {
			t.Errorf("collector Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("collector Run did not return 10s after cancel")
	}
	appRDB.Close()
	colRDB.Close()
	srv.Close()
	verifyNoLeaks(t, ignore)
	_ = event.Dropped
}

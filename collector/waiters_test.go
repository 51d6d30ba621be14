package collector

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/redistest"
	"github.com/lockscope/lockscope/lock"
)

// Three callers wait for one key: they show up within a second of starting
// to wait, and are gone within a second of their wait ending.
func TestWaitersLive(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	agg, reg := testAgg(t, Config{})
	startCollector(t, rdb, agg, &Options{Stream: stream, Replica: "w"})
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream, FlushInterval: 10 * time.Millisecond})
	t.Cleanup(func() { em.Close(ctx) })
	key := prefix + "inventory:1"

	holder := lock.New(rdb, &lock.Options{Owner: "holder", Recorder: em})
	l, err := holder.Obtain(ctx, key, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for _, who := range []string{"w1", "w2", "w3"} {
		c := lock.New(rdb, &lock.Options{Owner: who, Recorder: em})
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			l, err := c.Obtain(wctx, key, time.Minute, &lock.ObtainOptions{Retry: lock.LinearBackoff(5 * time.Millisecond)})
			if err != nil {
				t.Error(err)
				return
			}
			l.Release(ctx)
		})
	}
	waitWithin(t, time.Second, "three waiters shown", func() bool {
		d, _ := agg.Lock(key)
		return agg.Overview().Waiters == 3 && d.Waiters == 3 && len(d.WaitersNow) == 3 && metric(t, reg, "lockscope_waiters") == 3
	})
	t.Logf("three waiters shown %v after they began", time.Since(start).Round(time.Millisecond))
	d, _ := agg.Lock(key)
	for _, w := range d.WaitersNow {
		if w.Holder != "holder" || w.Deadline.Before(w.Since.Add(19*time.Second)) {
			t.Errorf("waiter %+v: want holder \"holder\" and its 20s deadline", w)
		}
	}
	b := agg.Blocking()
	if len(b.Holders) != 1 || b.Holders[0].Key != key || b.Holders[0].Owner != "holder" || b.Holders[0].Waiters != 3 || b.Holders[0].WaitSeconds <= 0 {
		t.Errorf("Blocking().Holders = %+v, want the holder with 3 waiters", b.Holders)
	}
	if metric(t, reg, "lockscope_wait_oldest_seconds") <= 0 {
		t.Error("lockscope_wait_oldest_seconds = 0 while callers wait")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	wg.Wait()
	waitWithin(t, time.Second, "waiters cleared", func() bool {
		return agg.Overview().Waiters == 0 && metric(t, reg, "lockscope_waiters") == 0
	})
	t.Logf("waiters cleared %v after the holder released", time.Since(released).Round(time.Millisecond))
}

// A holds x and waits for y while B holds y and waits for x (nested Do): one
// cycle, reported while it happens, counted once; it clears when the waits
// time out. Plain contention is no cycle.
func TestDeadlockDetected(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	agg, reg := testAgg(t, Config{})
	startCollector(t, rdb, agg, &Options{Stream: stream, Replica: "d"})
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream, FlushInterval: 10 * time.Millisecond})
	t.Cleanup(func() { em.Close(ctx) })
	x, y := prefix+"x", prefix+"y"

	both := make(chan struct{})
	var ready sync.WaitGroup
	ready.Add(2)
	run := func(owner, first, second string) error {
		c := lock.New(rdb, &lock.Options{Owner: owner, Recorder: em})
		return c.Do(ctx, first, time.Minute, nil, func(ctx context.Context) error {
			ready.Done()
			<-both
			wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			_, err := c.Obtain(wctx, second, time.Minute, &lock.ObtainOptions{Retry: lock.LinearBackoff(20 * time.Millisecond)})
			return err
		})
	}
	errs := make(chan error, 2)
	go func() { errs <- run("service-a", x, y) }()
	go func() { errs <- run("service-b", y, x) }()
	ready.Wait()
	close(both)
	start := time.Now()
	waitWithin(t, 2*time.Second, "one cycle", func() bool {
		return len(agg.Blocking().Cycles) == 1 && metric(t, reg, "lockscope_deadlock_cycles") == 1
	})
	t.Logf("deadlock reported %v after it formed", time.Since(start).Round(time.Millisecond))
	cy := agg.Blocking().Cycles[0]
	var got []string
	for _, m := range cy.Members {
		got = append(got, m.Owner+" holds "+m.Holds[len(prefix):]+" waits "+m.WaitsFor[len(prefix):])
	}
	slices.Sort(got)
	if want := []string{"service-a holds x waits y", "service-b holds y waits x"}; !slices.Equal(got, want) {
		t.Errorf("cycle = %q, want %q", got, want)
	}
	// The first wait to time out breaks the cycle: its Do releases its
	// lock, which the other may then get before its own deadline.
	timedOut := 0
	for range 2 {
		switch err := <-errs; {
		case errors.Is(err, lock.ErrNotObtained):
			timedOut++
		case err != nil:
			t.Errorf("deadlocked call = %v, want a timeout or success", err)
		}
	}
	if timedOut == 0 {
		t.Error("neither deadlocked call timed out")
	}
	waitWithin(t, 2*time.Second, "cycle gone", func() bool { return metric(t, reg, "lockscope_deadlock_cycles") == 0 })
	if n := metric(t, reg, "lockscope_deadlocks_detected_total"); n != 1 {
		t.Errorf("lockscope_deadlocks_detected_total = %v, want 1", n)
	}
}

// A waiter whose process died never sends its end: it is dropped once its
// deadline has passed.
func TestDeadWaiterDropped(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	w := ev(event.Waiting, "k", "ghost", "G1", 0)
	w.Wait = 2 * time.Second
	agg.Apply([]event.Event{w})
	if n := agg.Overview().Waiters; n != 1 {
		t.Fatalf("waiters = %d, want 1", n)
	}
	clk.Set(aggT0.Add(2500 * time.Millisecond))
	agg.Tick()
	if n := agg.Overview().Waiters; n != 1 {
		t.Fatalf("waiters %v after the waiter's deadline (within the grace) = %d, want 1", 2500*time.Millisecond, n)
	}
	clk.Set(aggT0.Add(3500 * time.Millisecond))
	agg.Tick()
	if n := agg.Overview().Waiters; n != 0 {
		t.Errorf("waiters past the deadline and its grace = %d, want 0: a dead waiter is a ghost", n)
	}
}

func waitWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Deadlocks, which pages call on every request, finds exactly the cycles of
// Blocking: a three-call cycle, a chain into it and plain waiters do not
// change what it reports, and without waiting holders it reports none.
func TestDeadlocksMatchBlockingCycles(t *testing.T) {
	agg, _ := newTestAggregator(t, Config{})
	waiting := func(key, owner, lease string, at time.Duration, holds ...string) event.Event {
		e := ev(event.Waiting, key, owner, lease, at)
		e.Wait, e.Reason = time.Minute, event.JoinLeases(holds)
		return e
	}
	agg.Apply([]event.Event{
		acquired("a", "A", "LA", 0, 0, 1, time.Minute),
		acquired("b", "B", "LB", 0, 0, 1, time.Minute),
		acquired("c", "C", "LC", 0, 0, 1, time.Minute),
		acquired("d", "D", "LD", 0, 0, 1, time.Minute),
		waiting("x", "E", "WE", time.Second), // waits for a free key, holds nothing
		waiting("a", "F", "WF", time.Second), // plain contention on a
	})
	if d, b := agg.Deadlocks(), agg.Blocking().Cycles; d != nil || b != nil {
		t.Fatalf("without a cycle: Deadlocks = %+v, Blocking().Cycles = %+v; want none", d, b)
	}
	agg.Apply([]event.Event{
		waiting("b", "A", "WA", 2*time.Second, "LA"),
		waiting("c", "B", "WB", 2*time.Second, "LB"),
		waiting("a", "D", "WD", 2*time.Second, "LD"), // a chain into the cycle
		waiting("a", "C", "WC", 3*time.Second, "LC"), // closes a -> b -> c -> a
	})
	d, b := agg.Deadlocks(), agg.Blocking().Cycles
	if len(d) != 1 || len(d[0].Members) != 3 {
		t.Fatalf("Deadlocks = %+v, want one cycle of three", d)
	}
	if !reflect.DeepEqual(d, b) {
		t.Errorf("Deadlocks = %+v, want Blocking().Cycles = %+v", d, b)
	}
}

// A restarted collector replays the waits of a deadlock that still lasts.
// Its previous incarnation counted that deadlock in
// lockscope_deadlocks_detected_total; the new one, whose counter starts at
// zero, shows the deadlock without counting it again. A deadlock that formed
// within a scan of the previous incarnation's stop (it may not have seen it),
// after it (in the counted part of the replay), or live is counted once.
func TestReplayedDeadlockNotCountedAgain(t *testing.T) {
	waiting := func(key, owner, lease string, at time.Duration, holds ...string) event.Event {
		e := ev(event.Waiting, key, owner, lease, at)
		e.Wait, e.Reason = time.Minute, event.JoinLeases(holds)
		return e
	}
	// deadlock: A holds a and waits for b, B holds b and waits for a, the
	// last wait beginning at formed.
	deadlock := func(a, b string, formed time.Duration) []event.Event {
		return []event.Event{
			acquired(a, "A", "L"+a, 0, 0, 1, 10*time.Minute),
			acquired(b, "B", "L"+b, 0, 0, 1, 10*time.Minute),
			waiting(b, "A", "W"+a, formed-time.Second, "L"+a),
			waiting(a, "B", "W"+b, formed, "L"+b),
		}
	}
	for _, tc := range []struct {
		name          string
		countedBefore time.Duration // 0: a first start, nothing counted before
		want          float64
	}{
		{"formed well before the stop", 10 * time.Second, 0},
		{"formed in the last scan before the stop", 5500 * time.Millisecond, 1},
		{"formed after the stop", 3 * time.Second, 1},
		{"first start", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newAggClock()
			agg := NewAggregator(Config{Now: clk.Now})
			reg := prometheus.NewRegistry()
			if err := agg.Register(reg); err != nil {
				t.Fatal(err)
			}
			clk.Set(aggT0.Add(20 * time.Second))
			evs := deadlock("x", "y", 5*time.Second)
			var countedBefore time.Time
			if tc.countedBefore > 0 {
				countedBefore = aggT0.Add(tc.countedBefore)
			}
			agg.BeginReplay(aggT0)
			agg.Replay(evs, tc.countedBefore < 5*time.Second) // counted before: muted
			agg.EndReplay(countedBefore)
			agg.Tick()
			if n := metric(t, reg, "lockscope_deadlock_cycles"); n != 1 {
				t.Fatalf("lockscope_deadlock_cycles = %v after the replay, want 1", n)
			}
			if n := metric(t, reg, "lockscope_deadlocks_detected_total"); n != tc.want {
				t.Errorf("lockscope_deadlocks_detected_total = %v after the replay, want %v", n, tc.want)
			}
			// The replayed deadlock lasts: later scans count it no more.
			clk.Add(2 * scanEvery)
			agg.Tick()
			if n := metric(t, reg, "lockscope_deadlocks_detected_total"); n != tc.want {
				t.Errorf("lockscope_deadlocks_detected_total = %v a scan later, want %v", n, tc.want)
			}
			// A new deadlock, live, is counted.
			agg.Apply(deadlock("p", "q", 21*time.Second))
			clk.Add(2 * scanEvery)
			agg.Tick()
			if n := metric(t, reg, "lockscope_deadlock_cycles"); n != 2 {
				t.Errorf("lockscope_deadlock_cycles = %v with a live deadlock added, want 2", n)
			}
			if n := metric(t, reg, "lockscope_deadlocks_detected_total"); n != tc.want+1 {
				t.Errorf("lockscope_deadlocks_detected_total = %v with a live deadlock added, want %v", n, tc.want+1)
			}
		})
	}
}

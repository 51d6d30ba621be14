package collector

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// Three callers wait for one key: they show up once they start to wait, and
// are gone once their wait ends (how soon, a second on a quiet host, is
// logged: a loaded host is slower, and the test must not fail for it).
func TestWaitersLive(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	agg, reg := testAgg(t, state.Config{})
	startFollower(t, rdb, agg, &Options{Stream: stream, Replica: "w"})
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
	redistest.WaitFor(t, waitLimit, "three waiters shown", func() bool {
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
	redistest.WaitFor(t, waitLimit, "waiters cleared", func() bool {
		return agg.Overview().Waiters == 0 && metric(t, reg, "lockscope_waiters") == 0
	})
	t.Logf("waiters cleared %v after the holder released", time.Since(released).Round(time.Millisecond))
}

// A holds x and waits for y while B holds y and waits for x (nested Do): one
// cycle, reported while it happens, counted once; it clears when a wait
// ends. Plain contention is no cycle.
func TestDeadlockDetected(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	agg, reg := testAgg(t, state.Config{})
	startFollower(t, rdb, agg, &Options{Stream: stream, Replica: "d"})
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream, FlushInterval: 10 * time.Millisecond})
	t.Cleanup(func() { em.Close(ctx) })
	x, y := prefix+"x", prefix+"y"

	both := make(chan struct{})
	var ready sync.WaitGroup
	ready.Add(2)
	// The waits last until the test has seen the cycle and ends one (or
	// 30 s): a loaded host sees it late, never misses it.
	quitA, breakA := context.WithCancel(ctx)
	defer breakA()
	run := func(quit context.Context, owner, first, second string) error {
		c := lock.New(rdb, &lock.Options{Owner: owner, Recorder: em})
		return c.Do(ctx, first, time.Minute, nil, func(ctx context.Context) error {
			ready.Done()
			<-both
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			stop := context.AfterFunc(quit, cancel)
			defer stop()
			_, err := c.Obtain(wctx, second, time.Minute, &lock.ObtainOptions{Retry: lock.LinearBackoff(20 * time.Millisecond)})
			return err
		})
	}
	errs := make(chan error, 2)
	go func() { errs <- run(quitA, "service-a", x, y) }()
	go func() { errs <- run(ctx, "service-b", y, x) }()
	ready.Wait()
	close(both)
	start := time.Now()
	redistest.WaitFor(t, waitLimit, "one cycle", func() bool {
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
	// The first wait to end breaks the cycle: its Do releases its lock,
	// which the other may then get before its own deadline.
	breakA()
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
	redistest.WaitFor(t, waitLimit, "cycle gone", func() bool { return metric(t, reg, "lockscope_deadlock_cycles") == 0 })
	if n := metric(t, reg, "lockscope_deadlocks_detected_total"); n != 1 {
		t.Errorf("lockscope_deadlocks_detected_total = %v, want 1", n)
	}
}

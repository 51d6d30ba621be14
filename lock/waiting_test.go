package lock

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// A contended obtain reports one waiting event when its first attempt finds
// the lock held (not one per retry), naming the holder it saw, its wait
// budget and the leases it already holds; an uncontended one reports none.
func TestWaitingReportedOncePerWaitWithHeldLeases(t *testing.T) {
	a, _, recA, prefix := newClient(t, "worker-a")
	b := New(a.rdb, &Options{Owner: "worker-b", Recorder: recA})
	ctx := context.Background()
	x, y := prefix+"x", prefix+"y"

	// Uncontended: nothing new.
	l, err := a.Obtain(ctx, x, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(recA.Of(event.Waiting)); n != 0 {
		t.Fatalf("uncontended obtain recorded %d waiting events, want 0", n)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	hy, err := b.Obtain(ctx, y, time.Minute, nil)
	sets := &redistest.Commands{Key: y, Name: "set"} // a's attempts on y
	a.rdb.AddHook(sets)
	if err != nil {
		t.Fatal(err)
	}
	// a holds x and, inside its Do, waits for y (held by b) for a while.
	done := make(chan error, 1)
	var outer string
	deadline := time.Now().Add(30 * time.Second) // y's wait budget
	go func() {
		done <- a.Do(ctx, x, time.Minute, nil, func(ctx context.Context) error {
			lx, _ := FromContext(ctx)
			outer = lx.ID()
			wctx, cancel := context.WithDeadline(ctx, deadline)
			defer cancel()
			ly, err := a.Obtain(wctx, y, time.Minute, &ObtainOptions{Retry: LinearBackoff(10 * time.Millisecond)})
			if err != nil {
				return err
			}
			return ly.Release(ctx)
		})
	}()
	redistest.WaitFor(t, 10*time.Second, "waiting event", func() bool { return len(recA.Of(event.Waiting)) == 1 })
	seen := time.Now() // the event was recorded before: with more of the budget left
	tries := sets.N()
	redistest.WaitFor(t, 10*time.Second, "several retries", func() bool { return sets.N() >= tries+3 })
	if err := hy.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ws := recA.Of(event.Waiting)
	if len(ws) != 1 {
		t.Fatalf("recorded %d waiting events, want one per wait", len(ws))
	}
	w := ws[0]
	acq := recA.Of(event.Acquired)
	last := acq[len(acq)-1]
	if w.Key != y || w.Owner != "worker-a" || w.Holder != "worker-b" || w.Lease != last.Lease || last.Key != y {
		t.Errorf("waiting = %+v, want key y, owner worker-a, holder worker-b and the lease the acquisition then carries (%q)", w, last.Lease)
	}
	if left := deadline.Sub(seen); w.Wait < left || w.Wait > 30*time.Second {
		t.Errorf("waiting.Wait = %v, want what was left of the 30s budget, in [%v, 30s]", w.Wait, left)
	}
	if got := w.HeldLeases(); !slices.Equal(got, []string{outer}) || outer == "" {
		t.Errorf("waiting call holds %q, want the Do's lease %q", got, outer)
	}
}

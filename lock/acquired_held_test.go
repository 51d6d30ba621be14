package lock

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// An acquisition lists the leases its context already holds, as a waiting
// event does: none for a call holding nothing, the Do's lease inside a Do,
// innermost first when nested, those added with WithHeld, and none of a
// lease released before the call.
func TestAcquiredListsHeldLeases(t *testing.T) {
	c, _, rec, prefix := newClient(t, "worker")
	ctx := context.Background()
	lastAcquired := func(key string) *event.Event {
		t.Helper()
		acq := rec.Of(event.Acquired)
		for i := len(acq) - 1; i >= 0; i-- {
			if acq[i].Key == key {
				return &acq[i]
			}
		}
		t.Fatalf("no acquired event of %q", key)
		return nil
	}

	l := mustObtain(t, c, prefix+"alone", time.Minute, nil)
	if e := lastAcquired(prefix + "alone"); e.Reason != "" || e.HeldLeases() != nil {
		t.Errorf("acquired outside any lock: reason %q, held %q; want none", e.Reason, e.HeldLeases())
	}
	l.Release(ctx)

	var outer, middle string
	err := c.Do(ctx, prefix+"order:1", time.Minute, nil, func(ctx context.Context) error {
		lo, _ := FromContext(ctx)
		outer = lo.ID()
		inner, err := c.Obtain(ctx, prefix+"inventory:1", time.Minute, nil)
		if err != nil {
			return err
		}
		if err := inner.Release(ctx); err != nil {
			return err
		}
		return c.Do(ctx, prefix+"invoice:1", time.Minute, nil, func(ctx context.Context) error {
			lm, _ := FromContext(ctx)
			middle = lm.ID()
			ctx = WithHeld(ctx, "feedc0de00000001", func() bool { return true })
			inner, err := c.Obtain(ctx, prefix+"ledger:1", time.Minute, nil)
			if err != nil {
				return err
			}
			return inner.Release(ctx)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lastAcquired(prefix+"inventory:1").HeldLeases(), []string{outer}; !slices.Equal(got, want) {
		t.Errorf("acquired in a Do holds %q, want the Do's lease %q", got, want)
	}
	if got := lastAcquired(prefix + "order:1").HeldLeases(); got != nil {
		t.Errorf("the outer Do's own acquisition holds %q, want none", got)
	}
	if got, want := lastAcquired(prefix+"ledger:1").HeldLeases(), []string{"feedc0de00000001", middle, outer}; !slices.Equal(got, want) {
		t.Errorf("acquired two Dos deep with a WithHeld hold = %q, want %q (WithHeld's, then innermost first)", got, want)
	}

	// A lease released before the call is not listed, even though its
	// context is the caller's.
	lx := mustObtain(t, c, prefix+"released", time.Minute, nil)
	if err := lx.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ly, err := c.Obtain(context.WithoutCancel(lx.Context()), prefix+"after", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ly.Release(ctx)
	if got := lastAcquired(prefix + "after").HeldLeases(); got != nil {
		t.Errorf("acquired after the outer lease's release holds %q, want none", got)
	}
}

// A context derived twice from one hold (a lease's context passed through
// an adapter's Context again) lists the hold once.
func TestHeldLeasesListsEachHoldOnce(t *testing.T) {
	c, _, _, prefix := newClient(t, "worker")
	l := mustObtain(t, c, prefix+"x", time.Minute, nil)
	defer l.Release(context.Background())
	yes := func() bool { return true }
	ctx := WithHeld(WithHeld(l.Context(), "A", yes), "A", yes)
	ctx = WithHeld(ctx, l.ID(), yes)
	if got, want := HeldLeases(ctx), []string{l.ID(), "A"}; !slices.Equal(got, want) {
		t.Errorf("HeldLeases = %q, want %q", got, want)
	}
}

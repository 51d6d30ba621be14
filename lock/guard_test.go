package lock

import (
	"context"
	"database/sql/driver"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/eventrec"
)

// TestFenceGuardRefusesAStaleHolder: the first holder's lock is forced away
// while it works and a second holder takes it; the resource accepts the
// second holder's write and the first holder's earlier-fenced one never
// overwrites it: it is refused, changes nothing, and is recorded as a
// fence_rejected event naming the lock key and the stale fence. The current
// holder may write again with its own fence.
func TestFenceGuardRefusesAStaleHolder(t *testing.T) {
	c, rdb, _, p := newClient(t, "guard")
	ctx := context.Background()
	key, res := p+"order:42", p+"order:42:data"
	fenced := &ObtainOptions{Fencing: true}
	first := mustObtain(t, c, key, 30*time.Second, fenced)
	rec := &eventrec.Recorder{}
	g := NewFenceGuard(rdb, &GuardOptions{Recorder: rec})
	if err := g.Set(ctx, key, first.Fence(), res, "v1"); err != nil {
		t.Fatalf("Set(first holder) = %v, want nil", err)
	}
	h, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceRelease(ctx, key, h.Fingerprint, "test", "stuck"); err != nil {
		t.Fatal(err)
	}
	second := mustObtain(t, c, key, 30*time.Second, fenced)
	if err := g.Set(ctx, key, second.Fence(), res, "v2"); err != nil {
		t.Fatalf("Set(second holder) = %v, want nil", err)
	}
	err = g.Set(ctx, key, first.Fence(), res, "stale")
	var se *StaleFenceError
	if !errors.Is(err, ErrStaleFence) || !errors.As(err, &se) || se.Fence != first.Fence() || se.Highest != second.Fence() {
		t.Fatalf("Set(stale holder) = %v, want ErrStaleFence with fence %d, highest %d", err, first.Fence(), second.Fence())
	}
	if v := rdb.Get(ctx, res).Val(); v != "v2" {
		t.Errorf("resource = %q after the refused write, want the second holder's %q", v, "v2")
	}
	if err := g.Set(ctx, key, second.Fence(), res, "v3"); err != nil {
		t.Errorf("Set(second holder, again) = %v, want nil", err)
	}
	evs := rec.Events()
	if len(evs) != 1 || evs[0].Type != event.FenceRejected || evs[0].Key != key || evs[0].Fence != first.Fence() || evs[0].Reason != res {
		t.Errorf("recorded %+v, want one fence_rejected of %q with fence %d and reason %q", evs, key, first.Fence(), res)
	}
	if got := rdb.Get(ctx, GuardKey(res)).Val(); got != strconv.FormatInt(second.Fence(), 10) {
		t.Errorf("GuardKey(%q) = %q, want the highest fence %d", res, got, second.Fence())
	}
}

// TestFenceGuardUpdated: the outcome of the SQL form, as database/sql's
// drivers report it (driver.RowsAffected is the result they return): a row
// changed is accepted; none changed is a refusal, recorded; an error of the
// statement is returned as it is, nothing recorded.
func TestFenceGuardUpdated(t *testing.T) {
	rec := &eventrec.Recorder{}
	g := NewFenceGuard(nil, &GuardOptions{Recorder: rec})
	ctx := context.Background()
	if err := g.Updated(ctx, "order:42", 9, "orders/42", driver.RowsAffected(1), nil); err != nil {
		t.Errorf("Updated(1 row) = %v, want nil", err)
	}
	err := g.Updated(ctx, "order:42", 7, "orders/42", driver.RowsAffected(0), nil)
	if !errors.Is(err, ErrStaleFence) || err.Error() != `lock: stale fence: "orders/42" refused fence 7` {
		t.Errorf("Updated(0 rows) = %v, want ErrStaleFence", err)
	}
	boom := errors.New("connection reset")
	if err := g.Updated(ctx, "order:42", 7, "orders/42", nil, boom); err != boom {
		t.Errorf("Updated(error) = %v, want %v", err, boom)
	}
	evs := rec.Events()
	if len(evs) != 1 || evs[0].Type != event.FenceRejected || evs[0].Fence != 7 || evs[0].Reason != "orders/42" {
		t.Errorf("recorded %+v, want one fence_rejected of fence 7", evs)
	}
}

// TestGuardKeyInTheResourcesSlot: the guard's script touches the resource
// and its highest fence at once, so both share a cluster hash slot.
func TestGuardKeyInTheResourcesSlot(t *testing.T) {
	for _, k := range []string{"order:42", "job:{7}:run", "a}b", ""} {
		if Slot(GuardKey(k)) != Slot(k) || GuardKey(k) == FenceKey(k) {
			t.Errorf("GuardKey(%q) = %q: slot %d, want %d and a key apart from FenceKey", k, GuardKey(k), Slot(GuardKey(k)), Slot(k))
		}
	}
}

package redsyncscope

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
)

// An uncontended lock taken while the context holds others lists them on
// its acquired event (the collector's lock-order graph): a mutex of this
// package's (Mutex.Context) and a lockscope lease alike; one taken holding
// nothing lists none.
func TestAcquiredListsTheOuterLeases(t *testing.T) {
	rs, rdb, rec, p := setup(t, "svc")
	ctx := context.Background()
	outer := rs.NewMutex(p + "order:1")
	if err := outer.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	defer outer.Unlock()
	lease, err := lock.New(rdb, nil).Obtain(outer.Context(ctx), p+"invoice:1", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	inner := rs.NewMutex(p + "inventory:1")
	if err := inner.LockContext(outer.Context(lease.Context())); err != nil {
		t.Fatal(err)
	}
	inner.Unlock()
	got := map[string]string{}
	for _, e := range rec.Events() {
		if e.Type == event.Acquired {
			got[e.Key] = e.Reason
		}
	}
	want := map[string]string{p + "order:1": "", p + "inventory:1": outer.ID() + "," + lease.ID()}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("acquired events' held leases by key (-want +got):\n%s", d)
	}
}

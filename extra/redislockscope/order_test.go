package redislockscope

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
)

// An uncontended lock taken while the context holds others lists them on
// its acquired event (the collector's lock-order graph): a lock of this
// package's (Lock.Context) and a lockscope lease alike; one taken holding
// nothing lists none, nor one taken after the outer lock's release.
func TestAcquiredListsTheOuterLeases(t *testing.T) {
	c, rdb, rec, p := setup(t, "svc")
	ctx := context.Background()
	outer, err := c.Obtain(ctx, p+"order:1", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := lock.New(rdb, nil).Obtain(outer.Context(ctx), p+"invoice:1", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	inner, err := c.Obtain(outer.Context(lease.Context()), p+"inventory:1", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	inner.Release(ctx)
	outer.Release(ctx)
	after, err := c.Obtain(outer.Context(ctx), p+"ledger:1", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	after.Release(ctx)
	got := map[string]string{}
	for _, e := range rec.Events() {
		if e.Type == event.Acquired {
			got[e.Key] = e.Reason
		}
	}
	want := map[string]string{p + "order:1": "", p + "inventory:1": outer.ID() + "," + lease.ID(), p + "ledger:1": ""}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("acquired events' held leases by key (-want +got):\n%s", d)
	}
}

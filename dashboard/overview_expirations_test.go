package dashboard

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/event"
)

// GET /api/v1/overview lists the recent expirations the overview page
// shows, newest first, each told apart as the page tells them: a holder
// still at work after its lock expired, or one that said nothing since.
// With none it is an empty list, not null.
func TestAPIOverviewListsExpirations(t *testing.T) {
	f := newFixture(t, nil)
	if o := decodeJSON[apiOverview](t, f.do(t, req{target: "/api/v1/overview"})); o.Expirations == nil || len(o.Expirations) != 0 {
		t.Errorf("expirations with none expired = %#v, want []", o.Expirations)
	}
	now := time.Now()
	dead, working, healthy := f.pfx+"invoice:batch-2", f.pfx+"ledger:account-501", f.pfx+"report:nightly"
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: dead, Owner: "billing-batch/pod-2", Lease: "b1", TS: now.Add(-90 * time.Second).UnixNano(), TTL: 10 * time.Second, Attempts: 1},
		{Type: event.Acquired, Key: working, Owner: "ledger-sync/pod-1", Lease: "s1", TS: now.Add(-80 * time.Second).UnixNano(), TTL: 10 * time.Second, Attempts: 1},
		{Type: event.Lost, Key: working, Owner: "ledger-sync/pod-1", Lease: "s1", TS: now.Add(-60 * time.Second).UnixNano(), Reason: "expired"},
		// Released in time: no expiration.
		{Type: event.Acquired, Key: healthy, Owner: "reports/pod-1", Lease: "r1", TS: now.Add(-30 * time.Second).UnixNano(), TTL: 10 * time.Second, Attempts: 1},
		{Type: event.Released, Key: healthy, Owner: "reports/pod-1", Lease: "r1", TS: now.Add(-29 * time.Second).UnixNano(), Hold: time.Second},
	})
	f.agg.Tick()

	o := decodeJSON[apiOverview](t, f.do(t, req{target: "/api/v1/overview"}))
	type exp struct {
		Key, Owner, Lease string
		Working           bool
		Href              string
	}
	var got []exp
	for _, e := range o.Expirations {
		if e.At.IsZero() || e.Held <= 0 {
			t.Errorf("expiration of %s: at %v, held %v s; want both set", e.Key, e.At, e.Held)
		}
		got = append(got, exp{e.Key, e.Owner, e.Lease, e.HolderWorking, e.Href})
	}
	want := []exp{
		// The dead holder's expiry is found at the tick, after the lost
		// event told of the working one's: the newest found comes first.
		{dead, "billing-batch/pod-2", "b1", false, apiLockPath(dead)},
		{working, "ledger-sync/pod-1", "s1", true, apiLockPath(working)},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("GET /api/v1/overview expirations (-want +got):\n%s", d)
	}
}

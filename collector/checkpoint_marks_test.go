package collector

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestCheckpointKeepsTheExpirationsMarks: the checkpoint a replica writes
// keeps each expiration's marks, and a restarted replica that restores it
// shows the same recent expirations as the one that wrote it: confirmed,
// under a holder still at work ("still working", counted in the overview),
// of a watched lock ("holder unknown").
func TestCheckpointKeepsTheExpirationsMarks(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	ctx := context.Background()
	now := time.Now()
	at := func(d time.Duration) int64 { return now.Add(-d).UnixNano() }

	a := state.New(state.Config{})
	a.Apply([]event.Event{
		{Type: event.Acquired, Key: "ledger:1", Owner: "sync/pod-1", Lease: "L1", TS: at(50 * time.Second), TTL: 2 * time.Second, Attempts: 1},
		{Type: event.Expired, Key: "ledger:1", Owner: "sync/pod-1", Lease: "L1", TS: at(48 * time.Second)},
		{Type: event.Lost, Key: "ledger:1", Owner: "sync/pod-1", Lease: "L1", TS: at(45 * time.Second), Reason: event.ReasonNotOwner},
		{Type: event.Acquired, Key: "batch:2", Owner: "billing/pod-2", Lease: "L2", TS: at(40 * time.Second), TTL: 2 * time.Second, Attempts: 1},
		{Type: event.Expired, Key: "batch:2", Owner: "billing/pod-2", Lease: "L2", TS: at(38 * time.Second), Passive: true},
		{Type: event.Acquired, Key: "redlock:3", Owner: "redlock 9a", TS: at(30 * time.Second), TTL: time.Second, Attempts: 1, Passive: true},
		{Type: event.Expired, Key: "redlock:3", Owner: "redlock 9a", TS: at(29 * time.Second), Passive: true},
	})
	w := New(rdb, a, &Options{Stream: stream})
	w.ckptMinAge = 0
	if err := w.writeCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	b := state.New(state.Config{})
	r := New(rdb, b, &Options{Stream: stream})
	ck, err := r.readCheckpoint(ctx)
	if err != nil || ck == nil {
		t.Fatalf("readCheckpoint = %v, %v", ck, err)
	}
	if n := r.restoreExpirations(ck, now); n != 3 {
		t.Fatalf("restored %d expirations, want 3", n)
	}
	marks := func(agg *state.Aggregator) map[string][3]bool {
		out := map[string][3]bool{}
		for _, e := range agg.Expirations(0) {
			out[e.Key] = [3]bool{e.Confirmed, e.HolderWorking, e.Passive}
		}
		return out
	}
	want := map[string][3]bool{"ledger:1": {false, true, false}, "batch:2": {true, false, false}, "redlock:3": {true, false, true}}
	if d := cmp.Diff(want, marks(a)); d != "" {
		t.Fatalf("the writer's expirations {Confirmed, HolderWorking, Passive} (-want +got):\n%s", d)
	}
	if d := cmp.Diff(marks(a), marks(b)); d != "" {
		t.Errorf("restored expirations differ from the writer's (-writer +restored):\n%s", d)
	}
	if oa, ob := a.Overview(), b.Overview(); oa.ExpiredWorking5m != 1 || ob.ExpiredWorking5m != oa.ExpiredWorking5m || ob.Expirations5m != oa.Expirations5m {
		t.Errorf("overview expirations (working): writer %d (%d), restored %d (%d), want equal, 1 working", oa.Expirations5m, oa.ExpiredWorking5m, ob.Expirations5m, ob.ExpiredWorking5m)
	}
}

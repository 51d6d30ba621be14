package collector

import (
	"context"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// Keyspace notifications are local to each cluster node: every master is
// watched.
func TestWatchClusterFollowsEveryMaster(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	ctx := context.Background()
	agg, reg := testAgg(t, state.Config{})
	c := startFollower(t, rdb, agg, &Options{Watch: []string{"lock:*"}})
	xaddPacked(t, rdb, event.DefaultStream, lockEvents([]string{"app:1"}, 10, time.Now()))
	waitSynced(t, c, 3)

	// Hash tags spread over the three masters' slot ranges.
	keys := []string{"lock:{a}", "lock:{b}", "lock:{c}", "lock:{d}", "lock:{e}"}
	slots := map[int64]bool{}
	for _, k := range keys {
		s, err := rdb.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[s*3/16384] = true
		if err := rdb.SetNX(ctx, k, token(k), 150*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if len(slots) != 3 {
		t.Fatalf("test keys cover %d masters, want 3", len(slots))
	}
	redistest.WaitFor(t, waitLimit, "every expiration confirmed", func() bool { return len(agg.Expirations(10)) == len(keys) })
	for _, e := range agg.Expirations(10) {
		if want := lock.ForeignOwner(token(e.Key)); !e.Confirmed || e.Owner != want {
			t.Errorf("Expiration %q = {Confirmed:%v Owner:%q}, want confirmed, owner %q", e.Key, e.Confirmed, e.Owner, want)
		}
	}
	redistest.WaitFor(t, waitLimit, "stream events applied", func() bool { return eventsTotal(agg) >= 20+int64(len(keys)) })
	if got := metric(t, reg, "lockscope_acquisitions_total"); got != 15 {
		t.Errorf("lockscope_acquisitions_total = %v, want 10 from the stream + 5 passive", got)
	}
}

// token is a node-redlock token of key's own: 32 hex digits.
func token(key string) string { return lock.Fingerprint(key)[:32] }

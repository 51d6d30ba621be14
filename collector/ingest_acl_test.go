package collector

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// collectorACL is the least a collector needs (documented in the report and
// docs/acl.md): its stream, its group, the expired keyevent channel, and for the
// passive watch of lock:* the keyspace channel plus read access to those keys.
var collectorACL = []any{
	"resetkeys", "~lockscope:events", "%R~lock:*",
	"resetchannels", "&__keyevent@0__:expired", "&__keyspace@0__:lock:*",
	"-@all", "+xreadgroup", "+xack", "+xautoclaim", "+xinfo|stream", "+xinfo|groups", "+xinfo|consumers", "+xgroup|create", "+xgroup|delconsumer",
	"+time", "+info", "+ping", "+psubscribe", "+punsubscribe", "+get", "+pttl", "+scan",
	// Rebuilding at start: replay the stream, recreate the replica's group,
	// keep the checkpoint and the presence key (string keys under the
	// stream's name, nothing else writable).
	"+xrange", "+xgroup|destroy", "(~lockscope:events:* +set +get)",
	// The passive watch: the watcher lease (a fenced lock of the library)
	// and the script that appends the watcher's events to the stream.
	"+evalsha", "+eval", "+xadd", "~lockscope:events:watcher:fence:*",
	"(~lockscope:events:watcher ~lockscope:fence:{lockscope:events:watcher} +evalsha +eval +get +set +pexpire +pttl +del +time)",
}

func TestLeastPrivilegeACL(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Notify: "KEA"})
	admin := srv.Client(t)
	ctx := context.Background()
	args := append([]any{"ACL", "SETUSER", "collector", "on", ">secret"}, collectorACL...)
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "collector", Password: "secret"})
	t.Cleanup(func() { rdb.Close() })

	var logs logBuffer
	agg, reg := testAgg(t, state.Config{})
	c := startFollower(t, rdb, agg, &Options{Watch: []string{"lock:*"}, Logger: logs.logger()})
	xaddPacked(t, admin, event.DefaultStream, lockEvents([]string{"app:1", "app:2"}, 10, time.Now()))
	redistest.WaitFor(t, waitLimit, "events applied", func() bool { return eventsTotal(agg) >= 40 })
	waitSynced(t, c, 1)
	if err := admin.SetNX(ctx, "lock:x", "q1Jx0m8ZbQ7yC4wXr2T9Uw==", 100*time.Millisecond).Err(); err != nil { // redsync's
		t.Fatal(err)
	}
	redistest.WaitFor(t, waitLimit, "passive lock expiry confirmed", func() bool {
		ex := agg.Expirations(1)
		return len(ex) == 1 && ex[0].Key == "lock:x" && ex[0].Confirmed
	})
	redistest.WaitFor(t, waitLimit, "nothing pending", func() bool { return pendingCount(t, admin, event.DefaultStream, c.opt.Group) == 0 })
	// The passive lock's acquisition and expiration come back through the
	// stream, written by the watcher.
	if got := eventsTotal(agg); got != 42 {
		t.Errorf("EventsTotal = %d, want 42", got)
	}
	if got := metric(t, reg, "lockscope_acquisitions_total"); got != 21 {
		t.Errorf("lockscope_acquisitions_total = %v, want 21", got)
	}
	if err := agg.Health(); err != nil {
		t.Errorf("Health() = %v, want nil", err)
	}
}

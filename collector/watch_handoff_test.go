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

// TestWatchRedissonHandOffBetweenWaiters: a Redisson lock passes from A to
// B and from B to C the way a woken waiter takes it, in the moment the
// holder's unlock deletes it (both in one transaction here, so the watcher
// always reads the key after the hand-off: the unlock's HINCRBY is read as
// the next holder's, its DEL comes after). The stream says three holds,
// each acquired once and released once, in order, and B's hold lasts
// at least as long as it was seen held (before, 4 acquisitions for 3: a phantom hold of B of
// some 74 µs ended by A's DEL, and A's hold never ended).
func TestWatchRedissonHandOffBetweenWaiters(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	agg, reg := testAgg(t, state.Config{})
	stream := "lockscope:events"
	c := startFollower(t, rdb, agg, &Options{Stream: stream, Replica: "handoff", Watch: []string{"ho:*"}})
	waitSynced(t, c, 1)
	const key = "ho:report"
	const a, b, cc = "0a6a8f0e-4f6e-4c1b-9d2a-4f0e1c2b3a4d:1", "1b7b9f1f-5a7f-4d2c-8e3b-5a1f2d3c4b5e:2", "2c8ca020-6b80-4e3d-9f4c-6b20e4d5c6f7:3"
	owners := map[string]string{a: "redisson 0a6a8f0e:1", b: "redisson 1b7b9f1f:2", cc: "redisson 2c8ca020:3"}
	held := func(field string) {
		t.Helper()
		redistest.WaitFor(t, waitLimit, owners[field]+" holding "+key, func() bool {
			l := lockInfo(agg, key)
			return l.Held && l.Owner == owners[field]
		})
	}
	// RLock.tryLockInnerAsync: HINCRBY field 1, PEXPIRE; unlockInnerAsync:
	// HINCRBY field -1, then DEL and PUBLISH once it reaches 0.
	lockOf := func(pipe redis.Pipeliner, field string) {
		pipe.HIncrBy(ctx, key, field, 1)
		pipe.PExpire(ctx, key, 30*time.Second)
	}
	unlockOf := func(pipe redis.Pipeliner, field string) {
		pipe.HIncrBy(ctx, key, field, -1)
		pipe.Del(ctx, key)
		pipe.Publish(ctx, "redisson_lock__channel:{"+key+"}", 0)
	}
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { lockOf(p, a); return nil }); err != nil {
		t.Fatal(err)
	}
	held(a)
	// B holds it at least from when the state shows it held to when the
	// second hand-off is sent.
	var bSeen, bGone time.Time
	for _, step := range [][2]string{{a, b}, {b, cc}} {
		if step[0] == b {
			bGone = time.Now()
		}
		if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { unlockOf(p, step[0]); lockOf(p, step[1]); return nil }); err != nil {
			t.Fatal(err)
		}
		held(step[1])
		if step[1] == b {
			bSeen = time.Now()
		}
	}
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { unlockOf(p, cc); return nil }); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, waitLimit, key+" free", func() bool { return !lockInfo(agg, key).Held })

	var got []string
	var bHold time.Duration
	for _, e := range redistest.ReadStream(t, rdb, stream).Events {
		if e.Key != key {
			continue
		}
		got = append(got, e.Type.String()+" "+e.Owner)
		if e.Type == event.Released && e.Owner == owners[b] {
			bHold = e.Hold
		}
	}
	want := []string{"acquired " + owners[a], "released " + owners[a], "acquired " + owners[b], "released " + owners[b],
		"acquired " + owners[cc], "released " + owners[cc]}
	if len(got) != len(want) {
		t.Fatalf("events of %s = %q, want %q", key, got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events of %s = %q, want %q", key, got, want)
		}
	}
	if held := bGone.Sub(bSeen); bHold < held {
		t.Errorf("B's hold = %v, want at least the %v it was seen holding the lock", bHold, held)
	}
	if n := metric(t, reg, "lockscope_acquisitions_total"); n != 3 {
		t.Errorf("lockscope_acquisitions_total = %v, want 3", n)
	}
}

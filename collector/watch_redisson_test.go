package collector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/redisson"
	"github.com/lockscope/lockscope/internal/testkit/redissontest"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
	"github.com/redis/go-redis/v9"
)

// A Redisson lock taken with node-redisson (a real client of Redisson's
// layout): held by its holder, named for what it is; the two callers
// waiting for it (subscribed to its channel) counted as its waiters; a
// forced release of what the operator saw wakes one of them at once
// (Redisson's unlock message), which takes it after a wait (contention);
// that holder crashes, its watchdog stops, the lock expires, and the last
// waiter takes it. A release quoting a fingerprint the hash no longer has
// changes nothing.
func TestWatchRedissonLocksOfNodeRedisson(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	agg, reg := testAgg(t, state.Config{})
	stream := "lockscope:events"
	c := startFollower(t, rdb, agg, &Options{Stream: stream, Replica: "rdz", Watch: []string{"rdz:*"}})
	waitSynced(t, c, 1)
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream, FlushInterval: 10 * time.Millisecond})
	defer em.Close(ctx)
	rel := redisson.NewAnyLockClient(lock.New(rdb, nil), rdb, em)

	const key, watchdog = "rdz:invoice", 6 * time.Second
	holderName := func() string {
		l, ok := redisson.Parse(rdb.HGetAll(ctx, key).Val())
		if !ok {
			return ""
		}
		return l.Owner()
	}
	holder := redissontest.StartNode(t, srv.Port(), key, watchdog)
	redistest.WaitFor(t, waitLimit, "the holder's lock", func() bool { return !holder.AcquiredAt().IsZero() })
	first := holderName()
	redistest.WaitFor(t, waitLimit, "the Redisson lock held in the state", func() bool {
		li := lockInfo(agg, key)
		return li.Held && li.Passive && li.Owner == first && li.TTL > 0 && li.TTL <= watchdog
	})
	if !strings.HasPrefix(first, "redisson ") || strings.Count(first, ":") != 1 {
		t.Errorf("holder named %q, want \"redisson <client id>:<thread>\", both shortened", first)
	}

	waiters := []*redissontest.Node{redissontest.StartNode(t, srv.Port(), key, watchdog), redissontest.StartNode(t, srv.Port(), key, watchdog)}
	redistest.WaitFor(t, waitLimit, "two waiters", func() bool { return lockInfo(agg, key).Waiters == 2 })
	if n := rdb.PubSubNumSub(ctx, redisson.Channel(key)).Val()[redisson.Channel(key)]; n != 2 {
		t.Errorf("PUBSUB NUMSUB %s = %d, want 2", redisson.Channel(key), n)
	}
	if got := metric(t, reg, "lockscope_waiters"); got != 2 {
		t.Errorf("lockscope_waiters = %v, want 2", got)
	}

	h, err := rel.Inspect(ctx, key)
	if err != nil || h.Owner != first || !h.Foreign || !strings.Contains(h.Value, "×1") || h.TTL <= 0 {
		t.Fatalf("Inspect(%q) = %+v, %v; want %s, foreign, its reentrancy count and TTL", key, h, err, first)
	}
	if _, err := rel.ForceRelease(ctx, key, strings.Repeat("0", 40), "ops", "stale look"); !errors.Is(err, lock.ErrOwnerChanged) {
		t.Errorf("ForceRelease with another fingerprint = %v, want ErrOwnerChanged", err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 1 {
		t.Fatalf("a refused release deleted the lock")
	}
	// Redisson's watchdog keeps at least 2/3 of its lease left: without the
	// unlock message the waiters would try again seconds from now. The
	// message is what the release owes them; how soon they wake is logged.
	// The test's own subscription is a subscriber as a waiter's is: it
	// ends once the message came, so the waiters counted are the callers.
	unlock := rdb.Subscribe(ctx, redisson.Channel(key))
	if _, err := unlock.Receive(ctx); err != nil {
		t.Fatalf("SUBSCRIBE %s: %v", redisson.Channel(key), err)
	}
	released := time.Now()
	if _, err := rel.ForceRelease(ctx, key, h.Fingerprint, "ops", "invoice export hung"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	mctx, cancel := context.WithTimeout(ctx, waitLimit)
	msg, err := unlock.ReceiveMessage(mctx)
	cancel()
	unlock.Close()
	if err != nil || msg.Payload != redisson.UnlockMessage {
		t.Errorf("message on %s after the forced release = %v, %v; want Redisson's unlock message %q", redisson.Channel(key), msg, err, redisson.UnlockMessage)
	}
	var next, last *redissontest.Node
	redistest.WaitFor(t, waitLimit, "a waiter woken by the release", func() bool {
		for i, w := range waiters {
			if !w.AcquiredAt().IsZero() {
				next, last = w, waiters[1-i]
				return true
			}
		}
		return false
	})
	took := next.AcquiredAt().Sub(released)
	t.Logf("a waiter took the lock %v after the forced release", took)
	second := holderName()
	redistest.WaitFor(t, waitLimit, "the woken waiter holds it, the other still waits", func() bool {
		li := lockInfo(agg, key)
		return li.Held && li.Owner == second && li.Waiters == 1
	})
	if li := lockInfo(agg, key); li.Contentions < 1 || second == first {
		t.Errorf("after the release: %+v; want the waiter's acquisition counted as contended, by another holder", li)
	}
	redistest.WaitFor(t, waitLimit, "the forced release counted", func() bool { return metric(t, reg, "lockscope_forced_releases_total") == 1 })

	// The new holder crashes: its watchdog stops, the lock expires, the last
	// waiter takes it.
	next.Kill()
	redistest.WaitFor(t, waitLimit, "the crashed holder's lock expired", func() bool {
		for _, e := range agg.Expirations(10) {
			if e.Key == key && e.Owner == second && e.Confirmed {
				return true
			}
		}
		return false
	})
	redistest.WaitFor(t, waitLimit, "the last waiter holds it", func() bool { return !last.AcquiredAt().IsZero() })
	third := holderName()
	redistest.WaitFor(t, waitLimit, "the state follows", func() error {
		if li := lockInfo(agg, key); !li.Held || li.Owner != third || li.Waiters != 0 {
			return fmt.Errorf("the state has held=%v owner=%q waiters=%d (PUBSUB NUMSUB %v); want held by %q, no waiters", li.Held, li.Owner, li.Waiters, rdb.PubSubNumSub(ctx, redisson.Channel(key)).Val(), third)
		}
		return nil
	})
	if third == second || third == first {
		t.Errorf("holders %q, %q, %q: want three", first, second, third)
	}
	// node-redisson's waiters come and go from the channel (a wait's timer
	// unsubscribes the client from the next wait's subscription): which of
	// its waits were seen ending by a give-up is not asserted, the
	// acquisitions are.
	if got := metric(t, reg, "lockscope_acquisitions_total"); got != 3 {
		t.Errorf("lockscope_acquisitions_total = %v, want 3 (holder, woken waiter, last waiter)", got)
	}
}

// A fair lock, read-write locks, as Java Redisson writes them: the fair
// lock's queue shown as its waiters, in order, each with its timeout; its
// forced release wakes the first waiter only (on the lock's channel followed
// by that waiter's field, as Redisson's unlock does), who then takes it
// after its wait; a waiter that gives up (acquireFailed) fails with reason
// timeout. A read lock is held by "redisson readers", a write lock by its
// writer; their forced releases publish on the read-write channel the
// message Redisson's forceUnlock publishes ("0" after readers, "1" after a
// writer).
func TestWatchRedissonJavaLayouts(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	agg, reg := testAgg(t, state.Config{})
	stream := "lockscope:events"
	c := startFollower(t, rdb, agg, &Options{Stream: stream, Replica: "java", Watch: []string{"jr:*"}})
	waitSynced(t, c, 1)
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream, FlushInterval: 10 * time.Millisecond})
	defer em.Close(ctx)
	rel := redisson.NewAnyLockClient(lock.New(rdb, nil), rdb, em)

	const fair = "jr:fair"
	fairKeys := []string{fair, redisson.QueueKey(fair), redisson.TimeoutKey(fair)}
	const idA, idB, idC = "0a6a8f0e-4f6e-4c1b-9d2a-4f0e1c2b3a4d", "1b7b9f1f-5a7f-4d2c-8e3b-5a1f2d3c4b5e", "2c8ca020-6b80-4e3d-9f4c-6b20e4d5c6f7"
	tryFair := func(field string) any {
		v, err := rdb.Eval(ctx, redissontest.FairTryLock, fairKeys, 30000, field, 5000, time.Now().UnixMilli()).Result()
		if err != nil && err.Error() != "redis: nil" {
			t.Fatalf("fair tryLock(%s): %v", field, err)
		}
		return v
	}
	if v := tryFair(idA + ":1"); v != nil {
		t.Fatalf("first fair tryLock = %v, want nil (acquired)", v)
	}
	tryFair(idB + ":2")
	tryFair(idC + ":3")
	redistest.WaitFor(t, waitLimit, "the fair lock's two queued waiters", func() bool {
		d, _ := agg.Lock(fair)
		return d.Held && d.Owner == "redisson 0a6a8f0e:1" && len(d.WaitersNow) == 2
	})
	d, _ := agg.Lock(fair)
	timeouts := rdb.ZRangeWithScores(ctx, redisson.TimeoutKey(fair), 0, -1).Val()
	for i, want := range []struct {
		owner string
		field string
	}{{"redisson 1b7b9f1f:2", idB + ":2"}, {"redisson 2c8ca020:3", idC + ":3"}} {
		x := d.WaitersNow[i]
		var timeout time.Time
		for _, z := range timeouts {
			if z.Member == want.field {
				timeout = time.UnixMilli(int64(z.Score))
			}
		}
		if x.Owner != want.owner || x.Holder != "redisson 0a6a8f0e:1" || x.Deadline.Sub(timeout).Abs() > time.Second {
			t.Errorf("waiter %d = %+v, want %s waiting for redisson 0a6a8f0e:1 until %v", i, x, want.owner, timeout)
		}
	}
	if l := lockInfo(agg, fair); l.Waiters != 2 {
		t.Errorf("Lock(fair).Waiters = %d, want 2", l.Waiters)
	}

	// The forced release wakes the first waiter, and only it.
	sub := rdb.Subscribe(ctx, redisson.Channel(fair)+":"+idB+":2", redisson.Channel(fair)+":"+idC+":3")
	defer sub.Close()
	for range 2 {
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h, err := rel.Inspect(ctx, fair)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rel.ForceRelease(ctx, fair, h.Fingerprint, "ops", "stuck"); err != nil {
		t.Fatalf("ForceRelease(fair): %v", err)
	}
	msg, err := sub.ReceiveTimeout(ctx, 5*time.Second)
	if m, ok := msg.(*redis.Message); err != nil || !ok || m.Channel != redisson.Channel(fair)+":"+idB+":2" || m.Payload != redisson.UnlockMessage {
		t.Fatalf("after the forced release, received %v, %v; want %q on the first waiter's channel", msg, err, redisson.UnlockMessage)
	}
	if v := tryFair(idB + ":2"); v != nil {
		t.Fatalf("the first waiter's tryLock = %v, want nil (acquired)", v)
	}
	redistest.WaitFor(t, waitLimit, "the first waiter holds it after its wait, the second still waits", func() bool {
		d, _ := agg.Lock(fair)
		return d.Held && d.Owner == "redisson 1b7b9f1f:2" && len(d.WaitersNow) == 1 && d.Contentions == 1
	})
	// The second gives up.
	if err := rdb.Eval(ctx, redissontest.FairAcquireFailed, fairKeys[1:], idC+":3", 5000).Err(); err != nil && err.Error() != "redis: nil" {
		t.Fatal(err)
	}
	redistest.WaitFor(t, waitLimit, "the second waiter's give-up", func() bool {
		return metric(t, reg, "lockscope_acquire_failures_total", "reason", "timeout") == 1 && len(func() []state.Waiter { d, _ := agg.Lock(fair); return d.WaitersNow }()) == 0
	})

	// Read-write locks.
	const rw = "jr:rw"
	readers := []string{"3d9db131-7c91-4f4e-8a5d-7c31f5e6d708:4", "4eaec242-8da2-405f-9b6e-8d42a6f7e819:5"}
	for _, f := range readers {
		if err := rdb.Eval(ctx, redissontest.ReadTryLock, []string{rw, "{" + rw + "}:" + f + ":rwlock_timeout"}, 30000, f, f+":write").Err(); err != nil && err.Error() != "redis: nil" {
			t.Fatal(err)
		}
	}
	redistest.WaitFor(t, waitLimit, "the read lock held by its readers", func() bool {
		l := lockInfo(agg, rw)
		return l.Held && l.Owner == "redisson readers"
	})
	rwSub := rdb.Subscribe(ctx, redisson.RWChannel(rw))
	defer rwSub.Close()
	if _, err := rwSub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	h, err = rel.Inspect(ctx, rw)
	if err != nil || !strings.Contains(h.Value, "read lock") || strings.Count(h.Value, "×1") != 2 {
		t.Fatalf("Inspect(rw) = %+v, %v; want a read lock with two readers", h, err)
	}
	if _, err := rel.ForceRelease(ctx, rw, h.Fingerprint, "ops", "stuck readers"); err != nil {
		t.Fatal(err)
	}
	if m, err := rwSub.ReceiveMessage(ctx); err != nil || m.Payload != redisson.UnlockMessage {
		t.Errorf("after releasing readers received %v, %v; want %q", m, err, redisson.UnlockMessage)
	}
	const writer = "5fbfd353-9eb3-4160-8c7f-9e53b708f92a:6:write"
	if err := rdb.Eval(ctx, redissontest.WriteTryLock, []string{rw}, 30000, writer).Err(); err != nil && err.Error() != "redis: nil" {
		t.Fatal(err)
	}
	redistest.WaitFor(t, waitLimit, "the write lock held by its writer", func() bool {
		l := lockInfo(agg, rw)
		return l.Held && l.Owner == "redisson 5fbfd353:6 (write)"
	})
	h, err = rel.Inspect(ctx, rw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rel.ForceRelease(ctx, rw, h.Fingerprint, "ops", "stuck writer"); err != nil {
		t.Fatal(err)
	}
	if m, err := rwSub.ReceiveMessage(ctx); err != nil || m.Payload != redisson.ReadUnlockMessage {
		t.Errorf("after releasing the writer received %v, %v; want %q", m, err, redisson.ReadUnlockMessage)
	}
	redistest.WaitFor(t, waitLimit, "three forced releases counted", func() bool { return metric(t, reg, "lockscope_forced_releases_total") == 3 })
}

package lock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

func TestMutualExclusion(t *testing.T) {
	c, _, _, p := newClient(t, "mutex")
	key := p + "counter"
	const workers, rounds = 50, 4
	// The counter is read and written in two steps: without mutual
	// exclusion, increments are lost. The atomics only keep the race
	// detector from flagging what the lock (invisible to it) orders.
	var counter, inside, overlaps atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opt := &ObtainOptions{Retry: ExponentialBackoff(time.Millisecond, 20*time.Millisecond)}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := c.Obtain(ctx, key, 5*time.Second, opt)
				if err != nil {
					errs <- err
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				v := counter.Load()
				runtime.Gosched()
				time.Sleep(100 * time.Microsecond)
				counter.Store(v + 1)
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("worker: %v", err)
	}
	if got, want := counter.Load(), int64(workers*rounds); got != want {
		t.Errorf("counter = %d, want %d", got, want)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d times two holders were inside at once, want 0", n)
	}
}

func TestTTLExpiry(t *testing.T) {
	c, rdb, _, p := newClient(t, "a")
	key := p + "k"
	ctx := context.Background()
	const ttl = time.Second // the PTTL read below must find the key on a loaded host
	start := time.Now()
	l := mustObtain(t, c, key, ttl, nil)
	if _, pttl := keyState(t, rdb, key); pttl <= 0 || pttl > ttl {
		t.Fatalf("PTTL after Obtain = %v, want in (0, %v]", pttl, ttl)
	}
	other := New(rdb, &Options{Owner: "b"})
	var l2 *Lease
	redistest.WaitFor(t, 15*time.Second, "lock free after TTL", func() bool {
		var err error
		l2, _, err = other.Try(ctx, key, time.Second, nil)
		return err == nil
	})
	if took := time.Since(start); took < ttl-10*time.Millisecond {
		t.Errorf("second owner got the lock after %v, before the TTL %v", took, ttl)
	}
	if err := l.Err(); !errors.Is(err, ErrLost) {
		t.Errorf("Err() after expiry = %v, want ErrLost", err)
	}
	if err := l.Refresh(ctx, time.Second); !errors.Is(err, ErrLost) {
		t.Errorf("Refresh after expiry = %v, want ErrLost", err)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Release after expiry = %v, want ErrNotHeld", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Errorf("Release by new owner = %v, want nil", err)
	}
}

func TestNonOwnerChangesNothing(t *testing.T) {
	c, rdb, rec, p := newClient(t, "old")
	key := p + "k"
	ctx := context.Background()
	old := mustObtain(t, c, key, 10*time.Second, nil)
	rdb.Del(ctx, key)
	cur := mustObtain(t, New(rdb, &Options{Owner: "new"}), key, 10*time.Second, nil)
	v0, pttl0 := keyState(t, rdb, key)

	if err := old.Refresh(ctx, time.Minute); !errors.Is(err, ErrLost) {
		t.Errorf("Refresh by non-owner = %v, want ErrLost", err)
	}
	if err := old.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Release by non-owner = %v, want ErrNotHeld", err)
	}
	v1, pttl1 := keyState(t, rdb, key)
	if v1 != v0 {
		t.Errorf("value after non-owner calls = %q, want unchanged %q", v1, v0)
	}
	if pttl1 > pttl0 || pttl1 <= 0 {
		t.Errorf("PTTL after non-owner calls = %v, want unchanged (<= %v)", pttl1, pttl0)
	}
	if rel := rec.Of(event.Released); len(rel) != 1 || rel[0].Reason != event.ReasonNotOwner || rel[0].Lease != old.ID() {
		t.Errorf("released events = %+v, want one with reason not_owner for lease %s", rel, old.ID())
	}
	if err := cur.Release(ctx); err != nil {
		t.Errorf("Release by owner = %v", err)
	}
	if v, _ := keyState(t, rdb, key); v != "" {
		t.Errorf("value after owner's Release = %q, want none", v)
	}
}

func TestRenewalKeepsLockPastThreeTTLs(t *testing.T) {
	c, rdb, rec, p := newClient(t, "renewer")
	key := p + "k"
	const ttl = time.Second // a renewal has two thirds of it to land on a loaded host
	l := mustObtain(t, c, key, ttl, &ObtainOptions{AutoRenew: true})
	// Ten renewals, a third of the TTL apart: past three TTLs.
	redistest.WaitFor(t, time.Minute, "ten renewals", func() bool { return len(rec.Of(event.Renewed)) >= 10 || l.Err() != nil })
	if err := l.Err(); err != nil {
		t.Fatalf("Err() after 4 TTLs with renewal = %v, want nil", err)
	}
	v, pttl := keyState(t, rdb, key)
	if val, err := ParseValue(v); err != nil || val.Lease != l.ID() {
		t.Errorf("key value = %q, want the lease's (%s)", v, l.ID())
	}
	if pttl <= 0 {
		t.Errorf("PTTL = %v, want > 0", pttl)
	}
	if n := len(rec.Of(event.Renewed)); n < 3 {
		t.Errorf("%d renewed events, want >= 3", n)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Errorf("Release = %v", err)
	}
	select {
	case <-l.Done():
	default:
		t.Error("Done not closed after Release")
	}
}

func TestLeaseLearnsOfLoss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(ctx context.Context, c *Client, key string) error
	}{
		{"deleted", func(ctx context.Context, c *Client, key string) error { return c.rdb.Del(ctx, key).Err() }},
		{"overwritten", func(ctx context.Context, c *Client, key string) error {
			return c.rdb.Set(ctx, key, "someone-else", time.Minute).Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, rec, p := newClient(t, "holder")
			key := p + "k"
			ctx := context.Background()
			// Long enough that the lease's own clock never ends it first:
			// the lost event's reason (not_owner, not error) says the next
			// renewal found the key gone or taken.
			const ttl = 3 * time.Second
			l := mustObtain(t, c, key, ttl, &ObtainOptions{AutoRenew: true})
			lctx := l.Context()
			if err := tc.break_(ctx, c, key); err != nil {
				t.Fatal(err)
			}
			broken := time.Now()
			if !waitClosed(l.Done(), 30*time.Second) {
				t.Fatalf("Done not closed 30s after the loss, want it at the next renewal (every %v)", ttl/3)
			}
			t.Logf("lease saw the loss %v after it (renewal interval %v)", time.Since(broken).Round(time.Millisecond), ttl/3)
			if lctx.Err() == nil {
				t.Error("lease context not cancelled")
			}
			if err := context.Cause(lctx); !errors.Is(err, ErrLost) {
				t.Errorf("context.Cause = %v, want ErrLost", err)
			}
			if err := l.Err(); !errors.Is(err, ErrLost) {
				t.Errorf("Err() = %v, want ErrLost", err)
			}
			lost := rec.Of(event.Lost)
			if len(lost) != 1 || lost[0].Reason != event.ReasonNotOwner || lost[0].Lease != l.ID() || lost[0].Hold <= 0 {
				t.Errorf("lost events = %+v, want one, reason not_owner, lease %s, hold > 0", lost, l.ID())
			}
		})
	}
}

func TestTryReportsHolder(t *testing.T) {
	c, rdb, rec, p := newClient(t, "bob")
	key := p + "k"
	ctx := context.Background()
	alice := New(rdb, &Options{Owner: "alice"})
	before := time.Now().Truncate(time.Millisecond) // the value keeps milliseconds
	held := mustObtain(t, alice, key, 5*time.Second, &ObtainOptions{Fencing: true})
	defer held.Release(ctx)

	l, h, err := c.Try(ctx, key, time.Second, nil)
	after := time.Now()
	if l != nil || !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Try(held) = %v, %v, want nil lease and ErrNotObtained", l, err)
	}
	v, _ := keyState(t, rdb, key)
	if h == nil || h.Owner != "alice" || h.Lease != held.ID() || h.Fence != held.Fence() || h.Fingerprint != Fingerprint(v) || h.Foreign {
		t.Fatalf("Try holder = %+v, want alice's lease %s fence %d", h, held.ID(), held.Fence())
	}
	if h.TTL <= 4*time.Second || h.TTL > 5*time.Second {
		t.Errorf("holder TTL = %v, want in (4s, 5s]", h.TTL)
	}
	if h.Since.Before(before) || h.Since.After(after) {
		t.Errorf("holder since %v, want between the Obtain (%v) and the Try (%v)", h.Since, before, after)
	}
	var noe *NotObtainedError
	if !errors.As(err, &noe) || noe.Reason != event.ReasonHeld || noe.Attempts != 1 || noe.Holder != h {
		t.Fatalf("error = %#v, want *NotObtainedError reason held, 1 attempt, the holder", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `held by "alice" for `) || !strings.Contains(msg, "more") {
		t.Errorf("error text = %q, want it to say who holds it and for how long", msg)
	}
	if f := rec.Of(event.Failed); len(f) != 1 || f[0].Reason != event.ReasonHeld || f[0].Holder != "alice" || f[0].Attempts != 1 {
		t.Errorf("failed events = %+v, want one, reason held, holder alice", f)
	}
}

func TestObtainHonoursDeadline(t *testing.T) {
	c, rdb, rec, p := newClient(t, "waiter")
	key := p + "k"
	held := mustObtain(t, New(rdb, &Options{Owner: "holder"}), key, 10*time.Second, nil)
	defer held.Release(context.Background())

	for _, tc := range []struct {
		name  string
		retry RetryStrategy
	}{
		{"linear", LinearBackoff(20 * time.Millisecond)},
		{"exponential capped far past the deadline", ExponentialBackoff(50*time.Millisecond, 10*time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const deadline = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			l, err := c.Obtain(ctx, key, time.Second, &ObtainOptions{Retry: tc.retry})
			took := time.Since(start)
			var noe *NotObtainedError
			if l != nil || !errors.As(err, &noe) || !errors.Is(err, ErrNotObtained) {
				t.Fatalf("Obtain(held) = %v, %v, want ErrNotObtained", l, err)
			}
			if noe.Reason != event.ReasonTimeout || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("reason = %q (err %v), want timeout matching context.DeadlineExceeded", noe.Reason, err)
			}
			if noe.Attempts < 2 || noe.Holder == nil || noe.Holder.Owner != "holder" {
				t.Errorf("attempts %d, holder %+v: want >= 2 attempts and holder \"holder\"", noe.Attempts, noe.Holder)
			}
			// Attempts come no sooner than the strategy's waits allow: one
			// more than the deadline holds says the wait ran past it. A
			// loaded host makes fewer, never more.
			if most := attemptsWithin(tc.retry, deadline); noe.Attempts > most {
				t.Errorf("Obtain made %d attempts, want at most the %d its waits fit in the %v deadline", noe.Attempts, most, deadline)
			}
			t.Logf("Obtain returned after %v (deadline %v, %d attempts)", took, deadline, noe.Attempts)
		})
	}
	if f := rec.Of(event.Failed); len(f) != 2 || f[0].Reason != event.ReasonTimeout || f[0].Attempts < 2 || f[0].Wait <= 0 {
		t.Errorf("failed events = %+v, want two with reason timeout", f)
	}
}

func TestObtainRetryWaitsForRelease(t *testing.T) {
	c, rdb, rec, p := newClient(t, "waiter")
	key := p + "k"
	held := mustObtain(t, New(rdb, &Options{Owner: "holder"}), key, 10*time.Second, nil)
	sets := &redistest.Commands{Key: key, Name: "set"} // the waiter's attempts
	rdb.AddHook(sets)
	go func() {
		// Three attempts, two 10 ms waits apart: the waiter waited at
		// least 20 ms however fast the host.
		redistest.Poll(t.Context(), func() bool { return sets.N() >= 3 })
		held.Release(context.Background())
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.Obtain(ctx, key, time.Second, &ObtainOptions{Retry: LinearBackoff(10 * time.Millisecond)})
	if err != nil {
		t.Fatalf("Obtain = %v, want a lease once the holder releases", err)
	}
	defer l.Release(ctx)
	a := rec.Of(event.Acquired)
	if len(a) != 1 || a[0].Attempts < 4 || a[0].Wait < 30*time.Millisecond || a[0].TTL != time.Second {
		t.Errorf("acquired events = %+v, want one with >= 4 attempts, wait >= 30ms, ttl 1s", a)
	}
}

func TestLimitRetryGivesUp(t *testing.T) {
	c, rdb, _, p := newClient(t, "waiter")
	key := p + "k"
	held := mustObtain(t, New(rdb, &Options{Owner: "holder"}), key, 10*time.Second, nil)
	defer held.Release(context.Background())
	_, err := c.Obtain(context.Background(), key, time.Second, &ObtainOptions{Retry: LimitRetry(LinearBackoff(time.Millisecond), 3)})
	var noe *NotObtainedError
	if !errors.As(err, &noe) || noe.Attempts != 4 || noe.Reason != event.ReasonHeld {
		t.Fatalf("Obtain with LimitRetry(3) = %v, want ErrNotObtained after 4 attempts, reason held", err)
	}
}

func TestDo(t *testing.T) {
	c, rdb, rec, p := newClient(t, "doer")
	ctx := context.Background()

	t.Run("returns fn's error and releases", func(t *testing.T) {
		key := p + "a"
		boom := errors.New("boom")
		err := c.Do(ctx, key, time.Second, nil, func(ctx context.Context) error {
			if v, _ := keyState(t, rdb, key); v == "" {
				t.Error("key not held while fn runs")
			}
			return boom
		})
		if !errors.Is(err, boom) || errors.Is(err, ErrLost) {
			t.Errorf("Do = %v, want boom only", err)
		}
		if v, _ := keyState(t, rdb, key); v != "" {
			t.Errorf("key after Do = %q, want released", v)
		}
	})
	t.Run("renews while fn runs", func(t *testing.T) {
		// A TTL of 1.5 s leaves a renewal (every third of it) a second to
		// land; with 150 ms, a host at a load average of 30 missed one. fn
		// runs until the fourth renewal: past the TTL.
		key := p + "b"
		renewals := func() int {
			n := 0
			for _, e := range rec.Of(event.Renewed) {
				if e.Key == key {
					n++
				}
			}
			return n
		}
		err := c.Do(ctx, key, 1500*time.Millisecond, nil, func(ctx context.Context) error {
			if !redistest.Poll(ctx, func() bool { return renewals() >= 4 }) {
				return ctx.Err()
			}
			return nil
		})
		if err != nil {
			t.Errorf("Do running past its TTL (%d renewals) = %v, want nil", renewals(), err)
		}
	})
	t.Run("ErrLost when the lock goes", func(t *testing.T) {
		key := p + "c"
		err := c.Do(ctx, key, 150*time.Millisecond, nil, func(ctx context.Context) error {
			rdb.Del(ctx, key)
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, ErrLost) || errors.Is(err, context.Canceled) {
			t.Errorf("Do whose key was deleted = %v, want ErrLost (not context.Canceled)", err)
		}
	})
	t.Run("fn finds its lease and fence in the context", func(t *testing.T) {
		key := p + "f"
		var fence int64
		err := c.Do(ctx, key, time.Second, &ObtainOptions{Fencing: true}, func(ctx context.Context) error {
			l, ok := FromContext(ctx)
			if !ok {
				return errors.New("no lease in fn's context")
			}
			h, err := c.Inspect(ctx, key)
			if err != nil || h.Lease != l.ID() {
				return fmt.Errorf("Inspect = %+v, %v, want lease %s", h, err, l.ID())
			}
			fence = l.Fence()
			return nil
		})
		if err != nil || fence <= 0 {
			t.Errorf("Do = %v with fence %d, want nil and a fence > 0", err, fence)
		}
		if _, ok := FromContext(ctx); ok {
			t.Error("FromContext found a lease in a plain context")
		}
	})
	t.Run("not obtained", func(t *testing.T) {
		key := p + "d"
		held := mustObtain(t, New(rdb, &Options{Owner: "x"}), key, time.Second, nil)
		defer held.Release(ctx)
		ran := false
		err := c.Do(ctx, key, time.Second, nil, func(context.Context) error { ran = true; return nil })
		if !errors.Is(err, ErrNotObtained) || ran {
			t.Errorf("Do on a held key = %v (fn ran: %v), want ErrNotObtained without running fn", err, ran)
		}
	})
}

func TestMaxHold(t *testing.T) {
	c, rdb, rec, p := newClient(t, "long")
	key := p + "k"
	start := time.Now()
	// Renewed every TTL/3 until MaxHold ends it, well before the TTL could
	// lapse on a busy host (a lapse would be a loss of another reason).
	l := mustObtain(t, c, key, 3*time.Second, &ObtainOptions{AutoRenew: true, MaxHold: 2 * time.Second})
	if !waitClosed(l.Done(), 10*time.Second) {
		t.Fatal("lease not ended after MaxHold")
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("lease ended after %v, before MaxHold 2s", took)
	}
	if r := rec.Of(event.Renewed); len(r) == 0 {
		t.Error("no renewal before MaxHold: the test wants a renewing lease")
	}
	if err := l.Err(); !errors.Is(err, ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", err)
	}
	lost := rec.Of(event.Lost)
	if len(lost) != 1 || lost[0].Reason != event.ReasonMaxHold {
		t.Errorf("lost events = %+v, want one with reason max_hold", lost)
	}
	// The key is still ours for the rest of its TTL, so Release cleans up.
	if err := l.Release(context.Background()); err != nil {
		t.Errorf("Release after MaxHold = %v, want nil", err)
	}
	if v, _ := keyState(t, rdb, key); v != "" {
		t.Errorf("key after Release = %q, want gone", v)
	}
}

func TestLeaseTTLAndRefresh(t *testing.T) {
	c, _, rec, p := newClient(t, "r")
	ctx := context.Background()
	start := time.Now()
	l := mustObtain(t, c, p+"k", time.Second, nil)
	defer l.Release(ctx)
	// What is left of 1s: at most all of it, at least what the time since
	// the obtain began leaves (and a millisecond of PTTL's rounding).
	d, err := l.TTL(ctx)
	if least := time.Second - time.Since(start) - time.Millisecond; err != nil || d <= least || d > time.Second {
		t.Errorf("TTL() = %v, %v, want (%v, 1s]", d, err, least)
	}
	if err := l.Refresh(ctx, time.Minute); err != nil {
		t.Fatalf("Refresh = %v", err)
	}
	if d, err := l.TTL(ctx); err != nil || d <= 59*time.Second {
		t.Errorf("TTL() after Refresh(1m) = %v, %v, want > 59s", d, err)
	}
	if r := rec.Of(event.Renewed); len(r) != 1 || r[0].TTL != time.Minute || r[0].Lease != l.ID() {
		t.Errorf("renewed events = %+v, want one with ttl 1m", r)
	}
}

func TestConcurrentCallersShareRoundTrips(t *testing.T) {
	c, rdb, _, p := newClient(t, "many")
	ctx := context.Background()
	const callers, rounds = 64, 20
	var wg sync.WaitGroup
	var failures atomic.Int64
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := p + strings.Repeat("x", i)
			for range rounds {
				l, err := c.Obtain(ctx, key, time.Second, nil)
				if err != nil {
					failures.Add(1)
					return
				}
				if err := l.Release(ctx); err != nil {
					failures.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Errorf("%d failures among %d uncontended cycles, want 0", n, callers*rounds)
	}
	if n := rdb.Keys(ctx, p+"*").Val(); len(n) != 0 {
		t.Errorf("keys left after release: %d, want 0", len(n))
	}
}

// TestObtainScriptIdempotent runs the obtain script twice with the same
// token, as go-redis does when it retries a request whose reply was lost:
// the second run must succeed, keep the fence, and not bump the counter.
func TestObtainScriptIdempotent(t *testing.T) {
	_, rdb, _, p := newClient(t, "")
	ctx := context.Background()
	key := p + "k"
	keys := []string{key, FenceKey(key)}
	head, tail := valueMagic+"tok|lease|", "|1|me"
	first, err := obtainScript.Run(ctx, rdb, keys, head, tail, 1000).Int64()
	if err != nil || first <= 0 {
		t.Fatalf("first obtain = %d, %v, want a fence", first, err)
	}
	second, err := obtainScript.Run(ctx, rdb, keys, head, tail, 5000).Int64()
	if err != nil || second != first {
		t.Errorf("repeated obtain = %d, %v, want the same fence %d", second, err, first)
	}
	if pttl := rdb.PTTL(ctx, key).Val(); pttl <= time.Second {
		t.Errorf("PTTL after repeat = %v, want the repeat's 5s TTL", pttl)
	}
	if c, _ := rdb.Get(ctx, FenceKey(key)).Int64(); c != first {
		t.Errorf("fence counter = %d, want %d (not bumped by the repeat)", c, first)
	}
	res, err := obtainScript.Run(ctx, rdb, keys, valueMagic+"other|lease2|", tail, 1000).Slice()
	if err != nil || len(res) != 2 {
		t.Fatalf("obtain by another token = %v, %v, want {value, pttl}", res, err)
	}
}

// TestAbandonedObtainIsReleased makes callers give up while their obtain
// waits behind a command Redis holds (in the batcher's queue, or in Redis on
// another connection): the obtains still run after their callers left, and
// must be released, not left held by nobody. Both kinds of obtain: a plain
// SET, and obtain.lua when fencing.
func TestAbandonedObtainIsReleased(t *testing.T) {
	for _, fencing := range []bool{false, true} {
		t.Run("fencing="+strconv.FormatBool(fencing), func(t *testing.T) { testAbandonedObtain(t, fencing) })
	}
}

func testAbandonedObtain(t *testing.T, fencing bool) {
	// Its own server: CLIENT PAUSE holds every client of it.
	srv := redistest.Start(t, redistest.Options{})
	rdb, admin := srv.Client(t), srv.Client(t)
	c := New(rdb, &Options{Owner: "quitter"})
	p := redistest.KeyPrefix(t)
	ctx := context.Background()

	// Keyspace notifications show each queued obtain take its key after
	// its caller left, and the release that follows.
	sub := admin.PSubscribe(ctx, "__keyspace@0__:"+p+"[0-9]*")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string][]string{} // key → its operations, in order
	go func() {
		for m := range sub.Channel() {
			mu.Lock()
			key := strings.TrimPrefix(m.Channel, "__keyspace@0__:")
			seen[key] = append(seen[key], m.Payload)
			mu.Unlock()
		}
	}()

	// The test, not the host's speed, decides how long the first command
	// takes: Redis holds writes (a script that writes is one) until
	// CLIENT UNPAUSE, and the obtains wait behind it, in the batcher's
	// queue or in Redis on another connection.
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 60_000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpause := sync.OnceFunc(func() { admin.Do(ctx, "CLIENT", "UNPAUSE") })
	t.Cleanup(unpause)
	held := newScript(`return redis.call('SET', KEYS[1], '1')`)
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		c.batch.run(ctx, held, []string{p + "held"})
	}()
	redistest.WaitFor(t, 10*time.Second, "the first command to wait in Redis", func() bool {
		info, err := admin.Info(ctx, "clients").Result()
		return err == nil && strings.Contains(info, "blocked_clients:1\r")
	})
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := range 20 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
			defer cancel()
			// Writes are paused on every connection, so none can
			// succeed before its caller gives up, however fast the host.
			if _, err := c.Obtain(ctx, p+strconv.Itoa(i), time.Minute, &ObtainOptions{Fencing: fencing}); errors.Is(err, context.DeadlineExceeded) {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if n := refused.Load(); n != 20 {
		t.Fatalf("%d of 20 queued obtains timed out, want all", n)
	}
	unpause()
	<-busy
	redistest.WaitFor(t, 15*time.Second, "every abandoned obtain to take its key and release it", func() error {
		if n := len(rdb.Keys(ctx, p+"[0-9]*").Val()); n > 0 {
			return fmt.Errorf("%d keys still held", n)
		}
		mu.Lock()
		defer mu.Unlock()
		for i := range 20 {
			if ops := seen[p+strconv.Itoa(i)]; !slices.Equal(ops, []string{"set", "del"}) && !slices.Equal(ops, []string{"set", "expire", "del"}) {
				return fmt.Errorf("key %d: operations %q, want set then del", i, ops)
			}
		}
		return nil
	})
	redistest.WaitFor(t, 15*time.Second, "no round trip in flight", func() bool {
		c.batch.mu.Lock()
		defer c.batch.mu.Unlock()
		return c.batch.inflight == 0
	})
}

func TestObtainErrors(t *testing.T) {
	c, rdb, rec, p := newClient(t, "e")
	ctx := context.Background()

	t.Run("wrong type fails at once", func(t *testing.T) {
		key := p + "list"
		rdb.RPush(ctx, key, "x")
		_, err := c.Obtain(ctx, key, time.Second, &ObtainOptions{Retry: LinearBackoff(10 * time.Millisecond)})
		var noe *NotObtainedError
		if !errors.As(err, &noe) || noe.Reason != event.ReasonError || noe.Attempts != 1 || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("Obtain on a list = %v, want reason error after 1 attempt naming WRONGTYPE", err)
		}
	})
	t.Run("cancelled context sends nothing", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := c.Obtain(cctx, p+"k", time.Second, nil)
		var noe *NotObtainedError
		if !errors.As(err, &noe) || noe.Reason != event.ReasonCanceled || noe.Attempts != 0 || !errors.Is(err, context.Canceled) {
			t.Errorf("Obtain with a cancelled context = %v, want reason canceled after 0 attempts", err)
		}
		if n := rdb.Exists(ctx, p+"k").Val(); n != 0 {
			t.Error("key taken by a cancelled Obtain")
		}
		f := rec.Of(event.Failed)
		if len(f) == 0 || f[len(f)-1].Reason != event.ReasonCanceled {
			t.Errorf("failed events = %+v, want the last with reason canceled", f)
		}
	})
	t.Run("bad ttl", func(t *testing.T) {
		if _, err := c.Obtain(ctx, p+"k", time.Microsecond, nil); err == nil {
			t.Error("Obtain with ttl 1µs = nil, want an error")
		}
	})
}

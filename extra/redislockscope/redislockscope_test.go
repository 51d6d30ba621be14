package redislockscope

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/eventrec"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func setup(t *testing.T, owner string) (*Client, *redis.Client, *eventrec.Recorder, string) {
	t.Helper()
	rdb := redistest.Shared(t).Client(t)
	rec := &eventrec.Recorder{}
	return New(rdb, &Options{Recorder: rec, Owner: owner}), rdb, rec, redistest.KeyPrefix(t)
}

type step = eventrec.Step

func TestObtainReleaseEventsAndValue(t *testing.T) {
	c, rdb, rec, p := setup(t, "billing/1")
	ctx := context.Background()
	key := p + "invoice:42"
	start := time.Now()
	l, err := c.Obtain(ctx, key, 10*time.Second, &redislock.Options{Metadata: "#meta"})
	if err != nil {
		t.Fatalf("Obtain = %v", err)
	}
	obtained := time.Now()
	stored := rdb.Get(ctx, key).Val()
	v, err := lock.ParseValue(strings.TrimSuffix(stored, "#meta"))
	if err != nil || v.Owner != "billing/1" || v.Lease != l.ID() {
		t.Fatalf("stored value %q parses to %+v, %v; want owner billing/1, lease %s", stored, v, err, l.ID())
	}
	if l.Token()+l.Metadata() != stored || l.Metadata() != "#meta" || l.Key() != key {
		t.Errorf("Token, Metadata, Key = %q, %q, %q; want the stored value split, and %q", l.Token(), l.Metadata(), l.Key(), key)
	}
	// Redis counts down from the SET, sent after start: no more than the
	// time since start (and a millisecond of rounding) is gone.
	if ttl, err := l.TTL(ctx); err != nil || ttl > 10*time.Second || ttl < 10*time.Second-time.Since(start)-time.Millisecond {
		t.Errorf("TTL = %v, %v; want 10s less at most the time since Obtain", ttl, err)
	}
	releasing := time.Now() // the hold lasts at least from obtained to here
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	want := []step{
		{Type: event.Acquired, Key: key, Owner: "billing/1", Lease: l.ID(), Attempts: 1},
		{Type: event.Released, Key: key, Owner: "billing/1", Lease: l.ID()},
	}
	if d := cmp.Diff(want, rec.Steps()); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	evs := rec.Events()
	if held := releasing.Sub(obtained); evs[0].TTL != 10*time.Second || evs[0].Wait <= 0 || evs[1].Hold < held {
		t.Errorf("acquired TTL %v wait %v, released hold %v; want 10s, > 0, >= %v (Obtain's return to Release)", evs[0].TTL, evs[0].Wait, evs[1].Hold, held)
	}
}

func TestRefusedTryNamesTheHolder(t *testing.T) {
	c, rdb, rec, p := setup(t, "cron/2")
	ctx := context.Background()
	key := p + "nightly"
	bare, err := redislock.New(rdb).Obtain(ctx, key, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Obtain(ctx, key, time.Minute, nil)
	if !errors.Is(err, redislock.ErrNotObtained) || err != ErrNotObtained {
		t.Fatalf("Obtain of a held key = %v, want redislock.ErrNotObtained itself", err)
	}
	want := []step{{Type: event.Failed, Key: key, Owner: "cron/2", Lease: rec.Events()[0].Lease,
		Holder: lock.ForeignOwner(bare.Token()), Reason: event.ReasonHeld, Attempts: 1}}
	if d := cmp.Diff(want, rec.Steps()); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
}

func TestWaitThenAcquire(t *testing.T) {
	c, _, rec, p := setup(t, "worker-b")
	a := New(redistest.Shared(t).Client(t), &Options{Recorder: rec, Owner: "worker-a"})
	ctx := context.Background()
	key := p + "job"
	la, err := a.Obtain(ctx, key, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		// Released once b waits: b's first attempt found it held.
		redistest.Poll(t.Context(), func() bool { return len(rec.Of(event.Waiting)) > 0 })
		la.Release(context.Background())
		close(released)
	}()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lb, err := c.Obtain(wctx, key, time.Minute, &redislock.Options{RetryStrategy: redislock.LinearBackoff(20 * time.Millisecond)})
	if err != nil {
		t.Fatalf("Obtain = %v", err)
	}
	defer lb.Release(ctx)
	evs := rec.Events()
	<-released // its event recorded
	got := rec.Steps()
	if len(got) != 4 {
		t.Fatalf("events = %+v, want acquired, waiting, released, acquired", got)
	}
	// a's release and b's acquisition race to the recorder: compare each
	// caller's own sequence.
	var ga, gb []step
	for _, s := range got {
		if s.Owner == "worker-a" {
			ga = append(ga, s)
		} else {
			gb = append(gb, s)
		}
	}
	got = append(ga, gb...)
	want := []step{
		{Type: event.Acquired, Key: key, Owner: "worker-a", Lease: la.ID(), Attempts: 1},
		{Type: event.Released, Key: key, Owner: "worker-a", Lease: la.ID()},
		{Type: event.Waiting, Key: key, Owner: "worker-b", Lease: lb.ID(), Holder: "worker-a", Attempts: 1},
		{Type: event.Acquired, Key: key, Owner: "worker-b", Lease: lb.ID(), Attempts: got[3].Attempts},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	var wait, acq event.Event
	for _, e := range evs {
		switch {
		case e.Type == event.Waiting:
			wait = e
		case e.Type == event.Acquired && e.Owner == "worker-b":
			acq = e
		}
	}
	if w := wait.Wait; w <= 0 || w > 30*time.Second {
		t.Errorf("waiting budget = %v, want what is left of the context's 30s", w)
	}
	if acq.Attempts < 2 || acq.Wait <= 0 {
		t.Errorf("acquired after %d attempts, wait %v; want a retry and the wait", acq.Attempts, acq.Wait)
	}
}

func TestWaitWithoutDeadlineUsesRedislocksOwn(t *testing.T) {
	c, rdb, rec, p := setup(t, "w")
	ctx := context.Background()
	key := p + "job"
	if _, err := redislock.New(rdb).Obtain(ctx, key, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	// redislock bounds a call without deadline by the TTL: 300ms here.
	_, err := c.Obtain(ctx, key, 300*time.Millisecond, &redislock.Options{RetryStrategy: redislock.LinearBackoff(20 * time.Millisecond)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Obtain = %v, want redislock's own deadline", err)
	}
	evs := rec.Events()
	if len(evs) != 2 || evs[0].Type != event.Waiting || evs[1].Type != event.Failed || evs[1].Reason != event.ReasonTimeout {
		t.Fatalf("events = %+v, want waiting then failed (timeout)", rec.Steps())
	}
	if evs[0].Wait != 300*time.Millisecond {
		t.Errorf("waiting budget = %v, want redislock's 300ms", evs[0].Wait)
	}
	if evs[1].Attempts < 1 || evs[1].Wait < 300*time.Millisecond {
		t.Errorf("failed after %d attempts and %v, want the whole 300ms", evs[1].Attempts, evs[1].Wait)
	}
}

func TestLimitedRetryGivesUpAsHeld(t *testing.T) {
	c, rdb, rec, p := setup(t, "w")
	ctx := context.Background()
	key := p + "job"
	if _, err := redislock.New(rdb).Obtain(ctx, key, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.Obtain(ctx, key, time.Minute, &redislock.Options{RetryStrategy: redislock.LimitRetry(redislock.LinearBackoff(time.Millisecond), 3)})
	if err != redislock.ErrNotObtained {
		t.Fatalf("Obtain = %v", err)
	}
	got := rec.Steps()
	if len(got) != 2 || got[0].Type != event.Waiting || got[1].Type != event.Failed || got[1].Reason != event.ReasonHeld || got[1].Attempts != 4 {
		t.Errorf("events = %+v, want waiting, then failed (held) after 4 attempts", got)
	}
}

func TestNestedWaitListsTheOuterLease(t *testing.T) {
	c, rdb, rec, p := setup(t, "svc")
	ctx := context.Background()
	if _, err := redislock.New(rdb).Obtain(ctx, p+"account", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	outer, err := c.Obtain(ctx, p+"ledger", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(outer.Context(ctx), 500*time.Millisecond) // room for the first attempt on a loaded host
	defer cancel()
	if _, err := c.Obtain(wctx, p+"account", time.Minute, &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)}); err == nil {
		t.Fatal("Obtain of a held key succeeded")
	}
	outer.Release(ctx)
	// Released: a context made before lists it no more.
	if _, err := c.Obtain(outer.Context(ctx), p+"account", 500*time.Millisecond, &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)}); err == nil {
		t.Fatal("Obtain of a held key succeeded")
	}
	var reasons []string
	for _, e := range rec.Events() {
		if e.Type == event.Waiting {
			reasons = append(reasons, e.Reason)
		}
	}
	if d := cmp.Diff([]string{outer.ID(), ""}, reasons); d != "" {
		t.Errorf("waiting events' held leases (-want +got):\n%s", d)
	}
}

func TestRefreshAndLoss(t *testing.T) {
	c, rdb, rec, p := setup(t, "o")
	ctx := context.Background()
	key := p + "job"
	before := time.Now()
	l, err := c.Obtain(ctx, key, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	obtained := time.Now()
	if err := l.Refresh(ctx, 2*time.Minute, nil); err != nil {
		t.Fatalf("Refresh = %v", err)
	}
	refreshed := time.Now()
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= time.Minute {
		t.Errorf("PTTL after Refresh = %v", ttl)
	}
	rdb.Set(ctx, key, "taken over", time.Minute)
	if err := l.Refresh(ctx, time.Minute, nil); err != redislock.ErrNotObtained {
		t.Fatalf("Refresh of a lock taken over = %v, want ErrNotObtained", err)
	}
	if err := l.Refresh(ctx, time.Minute, nil); err != redislock.ErrNotObtained {
		t.Fatalf("second Refresh = %v", err)
	}
	if err := l.Release(ctx); err != redislock.ErrLockNotHeld {
		t.Fatalf("Release of a lock taken over = %v, want ErrLockNotHeld", err)
	}
	if rdb.Get(ctx, key).Val() != "taken over" {
		t.Error("Release deleted another holder's key")
	}
	lease := l.ID()
	want := []step{
		{Type: event.Acquired, Key: key, Owner: "o", Lease: lease, Attempts: 1},
		{Type: event.Renewed, Key: key, Owner: "o", Lease: lease},
		{Type: event.Lost, Key: key, Owner: "o", Lease: lease, Reason: event.ReasonNotOwner},
		{Type: event.Released, Key: key, Owner: "o", Lease: lease, Reason: event.ReasonNotOwner},
	}
	if d := cmp.Diff(want, rec.Steps()); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	if evs := rec.Events(); evs[1].TTL != 2*time.Minute || evs[2].Hold <= 0 {
		t.Errorf("renewed TTL %v, lost hold %v", evs[1].TTL, evs[2].Hold)
	}
	// Headroom: the minute set in [before, obtained], less the refresh's
	// reply time, in [obtained, refreshed].
	lo, hi := before.Add(time.Minute).Sub(refreshed), obtained.Add(time.Minute).Sub(obtained)
	if h := rec.Events()[1].Headroom; h < lo || h > hi {
		t.Errorf("renewed headroom = %v, want within [%v, %v]", h, lo, hi)
	}
}

// failingScripter answers every script with an error: Redis unreachable.
type failingScripter struct{ *redis.Client }

func (f failingScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(errors.New("connection refused"))
	return cmd
}

func (f failingScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return f.EvalSha(ctx, "", keys, args...)
}

func TestRedisErrors(t *testing.T) {
	rec := &eventrec.Recorder{}
	ok := redistest.Shared(t).Client(t)
	c := New(failingScripter{ok}, &Options{Recorder: rec, Owner: "o"})
	ctx := context.Background()
	if _, err := c.Obtain(ctx, "k", time.Second, nil); err == nil || err.Error() != "connection refused" {
		t.Fatalf("Obtain = %v, want the client's error as it is", err)
	}
	good := New(ok, &Options{Recorder: rec, Owner: "o"})
	l, err := good.Obtain(ctx, redistest.KeyPrefix(t)+"k", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.c = c // the same lock through a failing connection
	bare := *l.l
	bare.Client = redislock.New(failingScripter{ok})
	l.l = &bare
	if err := l.Refresh(ctx, time.Minute, nil); err == nil {
		t.Fatal("Refresh through a failing client succeeded")
	}
	if err := l.Release(ctx); err == nil {
		t.Fatal("Release through a failing client succeeded")
	}
	var got []string
	for _, e := range rec.Events() {
		got = append(got, e.Type.String()+":"+e.Reason)
	}
	if d := cmp.Diff([]string{"failed:error", "acquired:", "renew_failed:error"}, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
}

func TestWithoutRecorderIsRedislock(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	c := New(rdb, nil)
	ctx := context.Background()
	key := redistest.KeyPrefix(t) + "k"
	l, err := c.Obtain(ctx, key, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, key).Val(); len(v) != 22 || v != l.Token() {
		t.Errorf("stored value %q, want redislock's own 22-character token", v)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != redislock.ErrLockNotHeld {
		t.Errorf("second Release = %v", err)
	}
}

func TestNestedUnderALockscopeLease(t *testing.T) {
	c, rdb, rec, p := setup(t, "svc")
	ctx := context.Background()
	if _, err := redislock.New(rdb).Obtain(ctx, p+"account", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	lease, err := lock.New(rdb, nil).Obtain(ctx, p+"ledger", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	wctx, cancel := context.WithTimeout(lease.Context(), 500*time.Millisecond) // room for the first attempt on a loaded host
	defer cancel()
	if _, err := c.Obtain(wctx, p+"account", time.Minute, &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)}); err == nil {
		t.Fatal("Obtain of a held key succeeded")
	}
	if evs := rec.Events(); len(evs) != 2 || evs[0].Type != event.Waiting || evs[0].Reason != lease.ID() {
		t.Errorf("events = %+v, want a waiting event listing the lockscope lease %s", rec.Steps(), lease.ID())
	}
}

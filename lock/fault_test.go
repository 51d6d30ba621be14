package lock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/eventrec"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// redistest's per-server goroutine that waits for redis-server to exit.
var ignoreServerWait = goleak.IgnoreAnyFunction("github.com/lockscope/lockscope/internal/testkit/redistest.(*Server).Start.func1")

// An obtain cut short by its deadline may have reached Redis, so a
// goroutine tries to release it for at most a second afterwards.
var ignoreOrphanRelease = goleak.IgnoreAnyFunction("github.com/lockscope/lockscope/lock.releaseOrphan")

func TestRedisStopped(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreServerWait, ignoreOrphanRelease, goleak.IgnoreCurrent())
	srv := redistest.Start(t, redistest.Options{Notify: "none"})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	rec := &eventrec.Recorder{}
	c := New(rdb, &Options{Owner: "o", Recorder: rec})
	ctx := context.Background()
	l := mustObtain(t, c, "k", 10*time.Second, nil)
	srv.Stop()

	const deadline = 300 * time.Millisecond
	octx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	_, err := c.Obtain(octx, "other", time.Second, &ObtainOptions{Retry: LinearBackoff(20 * time.Millisecond)})
	took := time.Since(start)
	var noe *NotObtainedError
	if !errors.As(err, &noe) {
		t.Fatalf("Obtain with Redis stopped = %v, want ErrNotObtained", err)
	}
	if noe.Reason != event.ReasonTimeout && noe.Reason != event.ReasonError {
		t.Errorf("reason = %q, want timeout or error", noe.Reason)
	}
	// Returning at all says the deadline ended the retries (Redis stays
	// down); attempts come no sooner than the waits allow, so one more
	// than fit says a wait ran past it. A loaded host makes fewer.
	t.Logf("Obtain returned after %v (deadline %v, %d attempts)", took, deadline, noe.Attempts)
	if most := attemptsWithin(LinearBackoff(20*time.Millisecond), deadline); noe.Attempts > most {
		t.Errorf("Obtain made %d attempts, want at most the %d its waits fit in the %v deadline", noe.Attempts, most, deadline)
	}

	// A single attempt reports the error as soon as the client gives up
	// dialling (one dial attempt here; go-redis's default is five).
	rdb1 := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialerRetries: 1})
	defer rdb1.Close()
	_, err = New(rdb1, nil).Obtain(ctx, "other", time.Second, nil)
	if !errors.As(err, &noe) || noe.Reason != event.ReasonError || noe.Err == nil {
		t.Errorf("single Obtain with Redis stopped = %v, want reason error with the cause", err)
	}

	rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer rcancel()
	if err := l.Refresh(rctx, time.Second); err == nil || errors.Is(err, ErrLost) {
		t.Errorf("Refresh with Redis stopped = %v, want a (transient) Redis error", err)
	}
	if f := rec.Of(event.RenewFailed); len(f) != 1 || f[0].Reason != event.ReasonError || f[0].Lease != l.ID() {
		t.Errorf("renew_failed events = %+v, want one with reason error", f)
	}
	if err := l.Err(); err != nil {
		t.Errorf("Err() after a failed refresh = %v, want nil (transient)", err)
	}
	for _, e := range rec.Of(event.Failed) {
		if e.Reason != event.ReasonTimeout && e.Reason != event.ReasonError {
			t.Errorf("failed event reason %q", e.Reason)
		}
	}
}

// TestRenewalSurvivesTransientErrors makes Redis refuse the renewal for a
// while (min-replicas-to-write 1 without replicas: every write gets NOREPLICAS) without losing
// the data: the lease records renew_failed and keeps the lock.
func TestRenewalSurvivesTransientErrors(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Notify: "none"})
	rdb := srv.Client(t)
	ctx := context.Background()
	rec := &eventrec.Recorder{}
	c := New(rdb, &Options{Recorder: rec})
	// Renewed every second; a failed one is tried again sooner, halving
	// the time left each time: 3 s leaves a loaded host room to turn the
	// refusal off before the lease runs out.
	const ttl = 3 * time.Second
	l := mustObtain(t, c, "k", ttl, &ObtainOptions{AutoRenew: true})
	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 20*time.Second, "renew_failed recorded", func() bool { return len(rec.Of(event.RenewFailed)) > 0 })
	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil {
		t.Fatal(err)
	}
	renewed := len(rec.Of(event.Renewed))
	redistest.WaitFor(t, 20*time.Second, "renewed again", func() bool { return len(rec.Of(event.Renewed)) > renewed || l.Err() != nil })
	if err := l.Err(); err != nil {
		t.Fatalf("Err() after a transient renewal failure = %v, want nil", err)
	}
	if h, err := c.Inspect(ctx, "k"); err != nil || h.Lease != l.ID() {
		t.Errorf("Inspect = %+v, %v, want still held by lease %s", h, err, l.ID())
	}
	if f := rec.Of(event.RenewFailed); f[0].Reason != event.ReasonError || f[0].Lease != l.ID() {
		t.Errorf("renew_failed = %+v, want reason error for lease %s", f[0], l.ID())
	}
	if len(rec.Of(event.Lost)) != 0 {
		t.Errorf("lost events = %+v, want none", rec.Of(event.Lost))
	}
}

// TestRenewalGivesUpOnHungServer pauses every client for longer than the
// TTL: the renewal cannot complete, and the lease context must be cancelled
// when the lock's validity runs out, not when the server answers again.
func TestRenewalGivesUpOnHungServer(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Notify: "none"})
	rdb := srv.Client(t)
	rec := &eventrec.Recorder{}
	c := New(rdb, &Options{Recorder: rec})
	// The hang lasts a minute, the TTL a second: a lease that waits for
	// the server's answer ends a minute late, not by a margin a loaded host
	// could eat.
	const ttl = time.Second
	l := mustObtain(t, c, "k", ttl, &ObtainOptions{AutoRenew: true})
	if err := rdb.Do(context.Background(), "CLIENT", "PAUSE", "60000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if !waitClosed(l.Done(), 30*time.Second) {
		t.Fatalf("lease context not cancelled 30s into a hang of a minute, want at its TTL %v", ttl)
	}
	t.Logf("lease gave up %v into the hang", time.Since(start))
	if lost := rec.Of(event.Lost); len(lost) != 1 || lost[0].Reason != event.ReasonError {
		t.Errorf("lost events = %+v, want one with reason error", lost)
	}
}

func TestDegradedMode(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Notify: "none"})
	// Fallback starts when the client gives up dialling; go-redis's default
	// of 5 dial attempts would take ~1.7 s per call.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	rec := &eventrec.Recorder{}
	c := New(rdb, &Options{Owner: "local", Recorder: rec, Degraded: true})
	ctx := context.Background()
	srv.Stop()

	l, err := c.Obtain(ctx, "k", time.Minute, &ObtainOptions{Fencing: true})
	if err != nil {
		t.Fatalf("Obtain in degraded mode with Redis stopped = %v, want a local lease", err)
	}
	if !l.Degraded() || l.Fence() <= 0 {
		t.Errorf("lease Degraded() = %v, Fence() = %d, want true and > 0", l.Degraded(), l.Fence())
	}
	_, h, err := c.Try(ctx, "k", time.Second, nil)
	if !errors.Is(err, ErrNotObtained) || h == nil || !h.Degraded || h.Lease != l.ID() {
		t.Fatalf("second Try in this process = %+v, %v, want ErrNotObtained naming the degraded lease", h, err)
	}
	if !strings.Contains(err.Error(), "process-local") {
		t.Errorf("error %q does not say the holder is process-local", err)
	}
	ih, err := c.Inspect(ctx, "k")
	if err != nil || !ih.Degraded || ih.Owner != "local" || ih.TTL <= 0 {
		t.Errorf("Inspect in degraded mode = %+v, %v, want the degraded holder", ih, err)
	}
	if err := l.Refresh(ctx, 2*time.Minute); err != nil {
		t.Errorf("Refresh of degraded lease = %v", err)
	}
	if d, err := l.TTL(ctx); err != nil || d <= time.Minute {
		t.Errorf("TTL of degraded lease = %v, %v, want > 1m", d, err)
	}

	// Redis is back: the degraded lease still excludes this process.
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// go-redis' pool answers its last dial error until its background
	// redial (once a second) succeeds.
	redistest.WaitFor(t, 10*time.Second, "the client reconnected", func() bool { return rdb.Ping(ctx).Err() == nil })
	if _, _, err := c.Try(ctx, "k", time.Second, nil); !errors.Is(err, ErrNotObtained) {
		t.Errorf("Try while a degraded lease is held = %v, want ErrNotObtained", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release of degraded lease = %v", err)
	}
	l2, err := c.Obtain(ctx, "k", time.Second, nil)
	if err != nil || l2.Degraded() {
		t.Fatalf("Obtain after recovery = %v (degraded %v), want a Redis lease", err, l2 != nil && l2.Degraded())
	}
	l2.Release(ctx)

	a := rec.Of(event.Acquired)
	if len(a) != 2 || !a[0].Degraded || a[1].Degraded {
		t.Errorf("acquired events = %+v, want the first degraded, the second not", a)
	}
	if r := rec.Of(event.Released); len(r) != 2 || !r[0].Degraded || r[0].Reason != "" {
		t.Errorf("released events = %+v, want the first degraded", r)
	}
	if f := rec.Of(event.Failed); len(f) != 2 || !f[0].Degraded || f[0].Holder != "local" {
		t.Errorf("failed events = %+v, want refused tries naming the degraded holder", f)
	}
}

func TestDegradedOffByDefault(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Notify: "none"})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	c := New(rdb, nil)
	srv.Stop()
	if _, err := c.Obtain(context.Background(), "k", time.Second, nil); !errors.Is(err, ErrNotObtained) {
		t.Errorf("Obtain with Redis stopped and degraded mode off = %v, want ErrNotObtained", err)
	}
}

package lock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestRefreshHeadroom: a renewal's headroom is the TTL left when it landed,
// measured conservatively: between what the caller's own clock readings
// around Obtain and Refresh allow, whatever the host's speed.
func TestRefreshHeadroom(t *testing.T) {
	t.Parallel()
	c, rdb, rec, p := newClient(t, "headroom")
	ctx := context.Background()
	const ttl = 10 * time.Second

	before := time.Now()
	l := mustObtain(t, c, p+"k", ttl, nil)
	obtained := time.Now()
	ttlGone(t, rdb, p+"k", ttl, 50*time.Millisecond)
	refreshing := time.Now()
	if err := l.Refresh(ctx, ttl); err != nil {
		t.Fatalf("Refresh = %v", err)
	}
	after := time.Now()
	defer l.Release(ctx)

	// The last write was sent in [before, obtained]; the refresh's reply came
	// in [refreshing, after].
	lo, hi := before.Add(ttl).Sub(after), obtained.Add(ttl).Sub(refreshing)
	got := rec.Of(event.Renewed)
	if len(got) != 1 {
		t.Fatalf("renewed events = %d, want 1", len(got))
	}
	if h := got[0].Headroom; h < lo || h > hi {
		t.Errorf("renewed headroom = %v, want within [%v, %v]", h, lo, hi)
	}
	if h := l.Headroom(); h != got[0].Headroom {
		t.Errorf("Lease.Headroom() = %v, want the event's %v", h, got[0].Headroom)
	}
	if h := got[0].Headroom; h > ttl-50*time.Millisecond {
		t.Errorf("renewed headroom = %v, want at most the TTL less the 50ms waited", h)
	}
}

// TestAutoRenewHeadroom: every automatic renewal carries its headroom, a
// positive duration no larger than the TTL, and Lease.Headroom is the last
// one's.
func TestAutoRenewHeadroom(t *testing.T) {
	t.Parallel()
	c, _, rec, p := newClient(t, "headroom")
	const ttl = 3 * time.Second // renewed every second: a loaded host still keeps it
	l := mustObtain(t, c, p+"k", ttl, &ObtainOptions{AutoRenew: true})
	redistest.WaitFor(t, 20*time.Second, "three renewals", func() bool { return len(rec.Of(event.Renewed)) >= 3 || l.Err() != nil })
	if err := l.Err(); err != nil {
		t.Fatalf("lease Err = %v after %d renewals, want held", err, len(rec.Of(event.Renewed)))
	}
	l.Release(context.Background())
	got := rec.Of(event.Renewed)
	for i, e := range got {
		if e.Headroom <= 0 || e.Headroom > ttl {
			t.Errorf("renewal %d headroom = %v, want in (0, %v]", i, e.Headroom, ttl)
		}
	}
	if h := l.Headroom(); h != got[len(got)-1].Headroom {
		t.Errorf("Lease.Headroom() = %v, want the last renewal's %v", h, got[len(got)-1].Headroom)
	}
}

// riskCalls records AtRisk calls.
type riskCalls struct {
	mu    sync.Mutex
	left  []time.Duration
	errs  []error // the lease's Err at the call
	calls chan struct{}
}

func newRiskCalls() *riskCalls { return &riskCalls{calls: make(chan struct{}, 16)} }

func (r *riskCalls) atRisk(l *Lease, left time.Duration) {
	err := l.Err()
	r.mu.Lock()
	r.left = append(r.left, left)
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	r.calls <- struct{}{}
}

func (r *riskCalls) get() ([]time.Duration, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.left...), append([]error(nil), r.errs...)
}

// TestAtRiskRearmedByRefresh: a refresh moves the warning: it comes when
// the refreshed lease, not the obtained one, has less than AtRiskBelow of
// its TTL left, with what is left then.
func TestAtRiskRearmedByRefresh(t *testing.T) {
	t.Parallel()
	c, rdb, _, p := newClient(t, "headroom")
	ctx := context.Background()
	const ttl = 10 * time.Second
	risk := newRiskCalls()
	// AtRiskBelow 0.5: the obtain's warning would come 5 s after it; the
	// refresh, sent well before, moves it to 5 s after the refresh.
	l := mustObtain(t, c, p+"k", ttl, &ObtainOptions{AtRisk: risk.atRisk, AtRiskBelow: 0.5})
	defer l.Release(ctx)
	ttlGone(t, rdb, p+"k", ttl, 300*time.Millisecond)
	refreshing := time.Now()
	if err := l.Refresh(ctx, ttl); err != nil {
		t.Fatalf("Refresh = %v", err)
	}
	select {
	case <-risk.calls:
	case <-time.After(30 * time.Second):
		t.Fatal("AtRisk not called after the refresh's warning time")
	}
	if since := time.Since(refreshing); since < ttl/2 {
		t.Errorf("AtRisk called %v after the refresh was sent, want no earlier than %v: the refresh moves the warning", since, ttl/2)
	}
	left, errs := risk.get()
	if len(left) != 1 || left[0] <= 0 || left[0] > ttl/2 {
		t.Errorf("AtRisk calls' left = %v, want one in (0, %v]", left, ttl/2)
	}
	if errs[0] != nil {
		t.Errorf("lease Err at AtRisk = %v, want nil (still held)", errs[0])
	}
}

// TestAtRiskBeforeLapse: a lease nobody renews warns its caller while it
// still holds the lock, with what is left, and only once per TTL.
func TestAtRiskBeforeLapse(t *testing.T) {
	t.Parallel()
	c, _, _, p := newClient(t, "headroom")
	const ttl = 2 * time.Second
	risk := newRiskCalls()
	start := time.Now()
	l := mustObtain(t, c, p+"k", ttl, &ObtainOptions{AtRisk: risk.atRisk}) // warns a quarter (500 ms) before
	defer l.Release(context.Background())
	select {
	case <-risk.calls:
	case <-time.After(10 * time.Second):
		t.Fatal("AtRisk not called before the lease lapsed")
	}
	at := time.Since(start)
	left, errs := risk.get()
	if left[0] <= 0 || left[0] > ttl/4 {
		t.Errorf("AtRisk left = %v, want in (0, %v]", left[0], ttl/4)
	}
	if at < ttl-ttl/4 {
		t.Errorf("AtRisk called %v after the obtain, want no earlier than %v", at, ttl-ttl/4)
	}
	if errs[0] != nil {
		t.Errorf("lease Err at AtRisk = %v, want nil: the warning comes before the lapse", errs[0])
	}
	redistest.WaitFor(t, 10*time.Second, "lease lost at its TTL", func() bool { return l.Err() != nil })
	// Only the warning timer calls AtRisk: one that is still armed after
	// the lapse would call it again, whenever it fires.
	l.mu.Lock()
	armed := l.warn != nil && l.warn.Stop()
	l.mu.Unlock()
	if armed {
		t.Error("AtRisk warning still armed after the lapse, want it spent")
	}
	if n, _ := risk.get(); len(n) != 1 {
		t.Errorf("AtRisk calls = %d, want 1", len(n))
	}
}

// slowRefresh holds every refresh script call, once armed, until released:
// a Redis turned slow for exactly as long as the test needs.
type slowRefresh struct {
	mu   sync.Mutex
	gate chan struct{} // nil: not armed
}

func (s *slowRefresh) arm() { s.mu.Lock(); s.gate = make(chan struct{}); s.mu.Unlock() }

func (s *slowRefresh) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

func (s *slowRefresh) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *slowRefresh) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.wait(cmd)
		return next(ctx, cmd)
	}
}

func (s *slowRefresh) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			s.wait(c)
		}
		return next(ctx, cmds)
	}
}

func (s *slowRefresh) wait(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 2 || (args[0] != "evalsha" && args[0] != "eval") {
		return
	}
	if sha, _ := args[1].(string); sha != refreshScript.Hash() && sha != refreshSrc {
		return
	}
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

// TestAtRiskSlowRenewal: auto-renewal against a Redis that turned slow
// lands late; the lease warns its caller, and the renewal's event carries
// the small headroom.
func TestAtRiskSlowRenewal(t *testing.T) {
	t.Parallel()
	_, rdb, rec, p := newClient(t, "headroom")
	slow := &slowRefresh{}
	rdb.AddHook(slow)
	c := New(rdb, &Options{Owner: "headroom", Recorder: rec})
	const ttl = 6 * time.Second
	risk := newRiskCalls()
	l := mustObtain(t, c, p+"k", ttl, &ObtainOptions{AutoRenew: true, AtRisk: risk.atRisk})
	defer l.Release(context.Background())
	// The first renewal is sent a third of the TTL (2 s) in and held on the
	// way until the warning (at 4.5 s, a quarter of 6 s left): it lands
	// with under a quarter left, 1.5 s to spare for a loaded host.
	slow.arm()
	defer slow.release()
	select {
	case <-risk.calls:
	case <-time.After(20 * time.Second):
		t.Fatal("AtRisk not called while the renewal was slow")
	}
	slow.release()
	redistest.WaitFor(t, 20*time.Second, "a renewal", func() bool { return len(rec.Of(event.Renewed)) >= 1 || l.Err() != nil })
	if l.Err() != nil {
		t.Fatalf("lease Err = %v, want nil: the slow renewal landed in time", l.Err())
	}
	h := rec.Of(event.Renewed)[0].Headroom
	if h <= 0 || h > ttl/4 {
		t.Errorf("slow renewal headroom = %v, want in (0, %v]: it landed after the warning", h, ttl/4)
	}
	if l.Err() != nil {
		t.Errorf("lease Err = %v, want nil: the slow renewal landed in time", l.Err())
	}
}

// ttlGone waits until Redis shows at least d of key's ttl gone: time a test
// lets pass between two calls, read where it passes.
func ttlGone(t *testing.T, rdb redis.UniversalClient, key string, ttl, d time.Duration) {
	t.Helper()
	redistest.WaitFor(t, 10*time.Second, fmt.Sprintf("%v of %s's TTL gone", d, key), func() bool {
		_, pttl := keyState(t, rdb, key)
		return pttl > 0 && pttl < ttl-d // below: PTTL counts whole milliseconds
	})
}

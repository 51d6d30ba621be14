package python

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockscope/lockscope/extra/redislockscope"
	"github.com/lockscope/lockscope/extra/redsyncscope"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// goParty is one Go service of the deadlock: it takes first, then, once
// told to go, waits for second while holding first, until ctx ends.
type goParty func(ctx context.Context, first, second string, holding chan<- string, goOn <-chan struct{}) error

// TestDeadlockAcrossPythonAndGo: four services, each holding one key of a
// ring and waiting for the next: a Python one (lockscope.Lock) and Go ones
// through the lock package, redislockscope and redsyncscope. The real
// lockscope serve finds the one cycle of four and shows every waiter
// where it shows ours: /api/v1/blocking, the key's waiters_now and page,
// lockscope_waiters and lockscope_deadlock_cycles. Once the Go services
// give up, the Python one gets its lock and the picture clears.
func TestDeadlockAcrossPythonAndGo(t *testing.T) {
	checkPython(t)
	srv := redistest.Start(t, redistest.Options{})
	srvURL := srv.URL()
	sv := startServe(t, srvURL)
	rdb := srv.Client(t)
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{FlushInterval: 10 * time.Millisecond})
	defer em.Close(context.Background())

	keys := []string{"orders:1", "stock:1", "shipping:1", "invoice:1"}
	owners := []string{"py-service", "go-lock", "go-redislock", "go-redsync"}
	parties := []goParty{
		lockParty(lock.New(rdb, &lock.Options{Owner: owners[1], Recorder: em})),
		redislockParty(redislockscope.New(rdb, &redislockscope.Options{Recorder: em, Owner: owners[2]})),
		redsyncParty(redsyncscope.New(&redsyncscope.Options{Recorder: em, Owner: owners[3]}, goredis.NewPool(rdb))),
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	py := startPython(ctx, t, "tests/drivers/deadlock.py", "--redis", srvURL, "--owner", owners[0],
		"--first", keys[0], "--second", keys[1], "--go", "go", "--wait", "60")
	leases := map[string]string{owners[0]: strings.Fields(py.expect(t, "holding ", 30*time.Second))[1]}

	goCtx, stopGo := context.WithCancel(ctx)
	defer stopGo()
	goOn := make(chan struct{})
	errs := make(chan error, len(parties))
	for i, p := range parties {
		holding := make(chan string, 1)
		go func() { errs <- p(goCtx, keys[i+1], keys[(i+2)%len(keys)], holding, goOn) }()
		select {
		case leases[owners[i+1]] = <-holding:
		case err := <-errs:
			t.Fatalf("%s: %v", owners[i+1], err)
		}
	}
	rdb.Set(ctx, "go", "1", time.Minute)
	close(goOn)
	formed := time.Now()

	type member struct{ Owner, Holds, WaitsFor string }
	var b struct {
		Waiters   int `json:"waiters"`
		Deadlocks [][]struct {
			Owner    string `json:"owner"`
			Lease    string `json:"lease"`
			Holds    string `json:"holds"`
			WaitsFor string `json:"waits_for"`
		} `json:"deadlocks"`
	}
	redistest.WaitFor(t, 10*time.Second, "the cycle of four in /api/v1/blocking", func() bool {
		sv.Get("/api/v1/blocking", &b)
		return len(b.Deadlocks) == 1 && len(b.Deadlocks[0]) == 4
	})
	t.Logf("the cycle of four shown %v after it formed", time.Since(formed).Round(time.Millisecond))
	var got, want []member
	waiting := map[string]string{} // owner -> the lease its waiting call will hold
	for _, m := range b.Deadlocks[0] {
		got = append(got, member{m.Owner, m.Holds, m.WaitsFor})
		waiting[m.Owner] = m.Lease
	}
	for i, o := range owners {
		want = append(want, member{o, keys[i], keys[(i+1)%len(keys)]})
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Owner > got[j].Owner })
	sort.Slice(want, func(i, j int) bool { return want[i].Owner > want[j].Owner })
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("deadlock members (-want +got):\n%s", d)
	}
	if b.Waiters != 4 {
		t.Errorf("/api/v1/blocking waiters = %d, want 4", b.Waiters)
	}

	for i, key := range keys {
		waiter, holder := owners[(i+len(keys)-1)%len(keys)], owners[i]
		d := sv.Lock(key)
		want := []waiterJSON{{Owner: waiter, Lease: waiting[waiter], Holder: holder, Holds: []string{leases[waiter]}}}
		// How long each has waited is not this test's to check.
		if d2 := cmp.Diff(want, d.WaitersNow, cmpopts.IgnoreFields(waiterJSON{}, "Waiting")); d2 != "" {
			t.Errorf("%s waiters_now (-want +got):\n%s", key, d2)
		}
		if d.Owner != holder || d.Lease != leases[holder] || d.Redis == nil || d.Redis.Owner != holder || d.Redis.Foreign {
			t.Errorf("%s: holder %q (lease %s), in Redis %+v; want %s (lease %s) in both, read from its value", key, d.Owner, d.Lease, d.Redis, holder, leases[holder])
		}
		page := sv.Get("/keys/"+key, nil)
		if !strings.Contains(page, `data-testid="waiter-row"`) || !strings.Contains(page, waiter) {
			t.Errorf("key page of %s shows no waiter row for %s", key, waiter)
		}
	}
	// The gauges follow the collector's scan (every second).
	redistest.WaitFor(t, 5*time.Second, "lockscope_deadlock_cycles 1", func() bool {
		return sv.Metric("lockscope_deadlock_cycles", nil) == 1
	})
	if n := sv.Metric("lockscope_waiters", nil); n != 4 {
		t.Errorf("lockscope_waiters summed = %v, want 4", n)
	}
	if n := sv.Metric("lockscope_deadlocks_detected_total", nil); n != 1 {
		t.Errorf("lockscope_deadlocks_detected_total = %v, want 1", n)
	}

	// The Go services give up (their contexts end) and release: the Python
	// service gets stock:1.
	stopGo()
	for range parties {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	py.expect(t, "acquired", 30*time.Second)
	py.wait(t, 30*time.Second)
	redistest.WaitFor(t, 10*time.Second, "the deadlock and the waiters to clear", func() bool {
		sv.Get("/api/v1/blocking", &b)
		return len(b.Deadlocks) == 0 && b.Waiters == 0 && sv.Metric("lockscope_waiters", nil) == 0
	})
	// Two emitters write the stream: go-lock's release may land after the
	// Python service's acquired and released (each batches on its own
	// clock), so the Python service's own steps are checked in order, and
	// go-lock's release by its presence.
	d := sv.Lock(keys[1])
	steps := d.RecentSteps()
	var pySteps []string
	sawGoRelease := false
	for _, s := range steps {
		switch {
		case strings.HasPrefix(strings.Fields(s)[1], "py-service"):
			pySteps = append(pySteps, strings.Fields(s)[0])
		case s == "released go-lock":
			sawGoRelease = true
		}
	}
	if !cmp.Equal(pySteps, []string{"waiting", "acquired", "released"}) {
		t.Errorf("%s's events of py-service = %q (all: %q), want its wait, acquired and released", keys[1], pySteps, steps)
	}
	if !sawGoRelease {
		t.Errorf("%s's events = %q, want go-lock's release", keys[1], steps)
	}
	if d.Held {
		t.Errorf("%s still held by %q after every service let go", keys[1], d.Owner)
	}
}

// waitGiveUp is how a Go party's wait ends: its context, cancelled by the
// test. Any other outcome is an error.
func waitGiveUp(who string, err error) error {
	if err == nil {
		return errors.New(who + ": got the lock of a deadlock")
	}
	return nil
}

func lockParty(c *lock.Client) goParty {
	return func(ctx context.Context, first, second string, holding chan<- string, goOn <-chan struct{}) error {
		l, err := c.Obtain(ctx, first, time.Minute, nil)
		if err != nil {
			return err
		}
		defer l.Release(context.Background())
		holding <- l.ID()
		<-goOn
		// The lease's context lists the lease in the waiting event; the
		// test's ends the wait.
		wctx, cancel := context.WithCancel(l.Context())
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		_, err = c.Obtain(wctx, second, time.Minute, &lock.ObtainOptions{Retry: lock.LinearBackoff(20 * time.Millisecond)})
		return waitGiveUp("go-lock", err)
	}
}

func redislockParty(c *redislockscope.Client) goParty {
	return func(ctx context.Context, first, second string, holding chan<- string, goOn <-chan struct{}) error {
		l, err := c.Obtain(ctx, first, time.Minute, nil)
		if err != nil {
			return err
		}
		defer l.Release(context.Background())
		holding <- l.ID()
		<-goOn
		_, err = c.Obtain(l.Context(ctx), second, time.Minute, &redislock.Options{RetryStrategy: redislock.LinearBackoff(20 * time.Millisecond)})
		return waitGiveUp("go-redislock", err)
	}
}

func redsyncParty(rs *redsyncscope.Redsync) goParty {
	return func(ctx context.Context, first, second string, holding chan<- string, goOn <-chan struct{}) error {
		m := rs.NewMutex(first, redsync.WithExpiry(time.Minute))
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		defer m.Unlock()
		holding <- m.ID()
		<-goOn
		err := rs.NewMutex(second, redsync.WithExpiry(time.Minute), redsync.WithTries(1<<30), redsync.WithRetryDelay(20*time.Millisecond)).LockContext(m.Context(ctx))
		return waitGiveUp("go-redsync", err)
	}
}

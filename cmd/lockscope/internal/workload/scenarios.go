package workload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockscope/lockscope/internal/ctxsleep"
	"github.com/lockscope/lockscope/lock"
)

// cron is the nightly report job deployed on 5 replicas: at every tick all
// of them wake within a few milliseconds and try the same lock once. The one
// that gets it runs the job; the others skip this tick. The runner holds the
// lock until the job ends, and at least until every replica has tried, so
// exactly one runs per tick.
func (s *Simulator) cron(ctx context.Context) {
	const replicas = 5
	r := s.rng()
	key := s.key("cron:nightly-report")
	if !ctxsleep.Sleep(ctx, s.scaled(time.Second)) {
		return
	}
	tick := time.NewTicker(s.scaled(5 * time.Second))
	defer tick.Stop()
	for {
		var jitter [replicas]time.Duration
		for i := range jitter {
			jitter[i] = between(r, 0, 20*time.Millisecond)
		}
		runFor := s.scaled(between(r, 200*time.Millisecond, 800*time.Millisecond))
		var tried, wg sync.WaitGroup
		tried.Add(replicas)
		var ran atomic.Int32
		for i := range replicas {
			wg.Go(func() {
				ctxsleep.Sleep(ctx, jitter[i])
				l := s.try(ctx, key, s.scaled(30*time.Second), &lock.ObtainOptions{
					Owner: fmt.Sprintf("report-cron/replica-%d", i+1),
				})
				tried.Done()
				if l == nil {
					return
				}
				ran.Add(1)
				ctxsleep.Sleep(ctx, runFor)
				tried.Wait()
				s.release(l)
			})
		}
		wg.Wait()
		if n := ran.Load(); n > 0 || ctx.Err() == nil {
			s.cronTicks.Add(1)
			if n > 0 {
				s.cronRuns.Add(1)
			}
			if n > 1 {
				s.cronDouble.Add(1)
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// workflow is people opening workflows in an editor: opening takes the
// workflow's lock (refused while a colleague edits it), the editor keeps it
// renewed for as long as the person works, seconds to minutes, and closing
// releases it.
func (s *Simulator) workflow(ctx context.Context) {
	users := []string{"alice", "bob", "chen", "dana", "emeka", "farah"}
	const maxOpen = 4
	r := s.rng()
	var wg sync.WaitGroup
	defer wg.Wait()
	var open atomic.Int32
	if !ctxsleep.Sleep(ctx, s.scaled(500*time.Millisecond)) {
		return
	}
	every := s.scaled(3 * time.Second)
	for {
		if open.Load() < maxOpen {
			key := s.key(fmt.Sprintf("workflow:%d", 1001+r.IntN(8)))
			owner := "workflow-editor/" + users[r.IntN(len(users))]
			hold := s.scaled(between(r, 5*time.Second, 25*time.Second))
			open.Add(1)
			wg.Go(func() {
				defer open.Add(-1)
				s.session(ctx, key, owner, hold)
			})
		}
		if !ctxsleep.Sleep(ctx, between(r, every/2, every*3/2)) {
			return
		}
	}
}

func (s *Simulator) session(ctx context.Context, key, owner string, hold time.Duration) {
	l := s.try(ctx, key, s.scaled(6*time.Second), &lock.ObtainOptions{AutoRenew: true, Owner: owner})
	if l == nil {
		return
	}
	s.sessions.Add(1)
	if s.holdUntil(ctx, l, hold) {
		s.release(l)
	}
}

// holdUntil keeps l for d, or until ctx ends; it reports false if the lock
// was lost meanwhile (an operator force-released it, or renewal failed).
func (s *Simulator) holdUntil(ctx context.Context, l *lock.Lease, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-l.Done():
		s.lost.Add(1)
		s.log.Debug("workload: lock lost while held", "key", l.Key(), "err", l.Err())
		return false
	}
	return true
}

// stuck is an export worker whose call to a partner API never returns. Its
// lock's renewer is a separate goroutine and keeps working, so the lock
// stays held, renewed, far past any normal hold: the stuck lock an operator
// has to find and force-release. Other export pods are asked to run the same
// tenant's export meanwhile: they queue behind the hung holder (waiting up to
// 45 s each, a new one every 10 s, at most three at once) and give up. With
// HangUntilReleased the hang lasts until an operator force-releases the
// lock; otherwise a watchdog ends it after 90 s (at Speed 1). Then the
// worker releases and, a while later, hangs again on another tenant.
func (s *Simulator) stuck(ctx context.Context) {
	r := s.rng()
	if !ctxsleep.Sleep(ctx, s.scaled(time.Second)) {
		return
	}
	for {
		key := s.key(fmt.Sprintf("export:tenant-%d", 40+r.IntN(20)))
		wctx, cancel := context.WithTimeout(ctx, s.scaled(5*time.Second))
		l := s.obtain(wctx, key, s.scaled(10*time.Second), &lock.ObtainOptions{
			AutoRenew: true,
			Retry:     lock.LinearBackoff(s.scaled(200 * time.Millisecond)),
			Owner:     "export-worker/pod-2",
		})
		cancel()
		if l != nil {
			s.hangs.Add(1)
			s.log.Debug("workload: export worker hangs holding its lock", "key", key)
			hang := s.scaled(90 * time.Second)
			if s.opt.HangUntilReleased {
				hang = time.Duration(1<<63 - 1)
			}
			stop := make(chan struct{})
			var queue sync.WaitGroup
			queue.Go(func() { s.exportQueue(ctx, stop, key) })
			if s.holdUntil(ctx, l, hang) {
				s.release(l)
			}
			close(stop) // those waiting now get the lock in turn
			queue.Wait()
		}
		if !ctxsleep.Sleep(ctx, s.scaled(20*time.Second)) {
			return
		}
	}
}

// exportQueue sends other export pods to key until stop closes: each waits
// up to 45 s for the lock, runs the export for a second if it gets it, and
// releases. It returns when the last of them is done.
func (s *Simulator) exportQueue(ctx context.Context, stop <-chan struct{}, key string) {
	var wg sync.WaitGroup
	defer wg.Wait()
	waiting := make(chan struct{}, 3)
	pause := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-stop:
		case <-ctx.Done():
		}
		return false
	}
	for pod := 3; ; pod++ {
		if !pause(s.scaled(3 * time.Second)) {
			return
		}
		select {
		case waiting <- struct{}{}:
		default:
			continue // three wait already
		}
		owner := fmt.Sprintf("export-worker/pod-%d", 3+(pod-3)%6)
		wg.Go(func() {
			defer func() { <-waiting }()
			wctx, cancel := context.WithTimeout(ctx, s.scaled(45*time.Second))
			l := s.obtain(wctx, key, s.scaled(10*time.Second), &lock.ObtainOptions{
				Retry: lock.LinearBackoff(s.scaled(500 * time.Millisecond)),
				Owner: owner,
			})
			cancel()
			if l != nil {
				ctxsleep.Sleep(ctx, s.scaled(time.Second))
				s.release(l)
			}
		})
		if !pause(s.scaled(7 * time.Second)) {
			return
		}
	}
}

// crash is a billing batch that is OOM-killed while holding its lock: no
// release, no renewal. Redis expires the key after its TTL, and the next
// run finds it free. Nothing in the process can report the expiry: the
// collector detects it.
func (s *Simulator) crash(ctx context.Context) {
	r := s.rng()
	if !ctxsleep.Sleep(ctx, s.scaled(3*time.Second)) {
		return
	}
	for n := 0; ; n++ {
		key := s.key(fmt.Sprintf("invoice:batch-%d", 1+n%3))
		owner := fmt.Sprintf("billing-batch/pod-%d", 1+r.IntN(3))
		if l := s.try(ctx, key, s.scaled(4*time.Second), &lock.ObtainOptions{Owner: owner}); l != nil {
			ctxsleep.Sleep(ctx, s.scaled(300*time.Millisecond))
			// Killed here. The lease is dropped on the floor.
			s.crashes.Add(1)
			s.abandoned.Add(1)
			s.log.Debug("workload: billing batch crashed holding its lock", "key", key)
		}
		if !ctxsleep.Sleep(ctx, s.scaled(15*time.Second)) {
			return
		}
	}
}

// pause is a ledger sync whose lock renews in the background while it
// works, until its process freezes for longer than the TTL (a stop-the-world
// GC, a VM migration, SIGSTOP): its Redis connections freeze, so the renewal
// that is due cannot get through. The lock expires and a second replica
// takes it over. The lease notices the loss (a lost event, its context
// cancelled) and the sync aborts rather than write under a lock it no longer
// holds. Every other time the sync's code does not look at its lease: thawed,
// it writes what it synced while the second replica holds the lock, two
// holders at once (the workload's ground truth, logged as "workload:
// overlap"), and the account's fence guard refuses the stale write.
func (s *Simulator) pause(ctx context.Context) {
	if !ctxsleep.Sleep(ctx, s.scaled(5*time.Second)) {
		return
	}
	for n := 0; ; n++ {
		key := s.key(fmt.Sprintf("ledger:account-%d", 500+n%5))
		ttl := s.scaled(2 * time.Second)
		opt := &lock.ObtainOptions{AutoRenew: true, Owner: "ledger-sync/pod-1", Fencing: true}
		if l := s.tryWith(s.pc, ctx, key, ttl, opt); l != nil {
			s.paused(ctx, l, ttl, n%2 == 1)
		}
		if !ctxsleep.Sleep(ctx, s.scaled(25*time.Second)) {
			return
		}
	}
}

func (s *Simulator) paused(ctx context.Context, l *lock.Lease, ttl time.Duration, worksOn bool) {
	s.pauses.Add(1)
	if !s.holdUntil(ctx, l, ttl/2) { // syncing, renewed in the background
		return
	}
	freeze := 2*ttl + ttl/2
	s.stall.pause(freeze)
	defer s.stall.resume()
	noticed := make(chan struct{})
	took := make(chan time.Time, 1) // when the second replica got the lock
	var wg sync.WaitGroup
	wg.Go(func() { s.takeOver(ctx, l.Key(), ttl, freeze, noticed, took) })
	defer wg.Wait()
	defer close(noticed)

	ctxsleep.Sleep(ctx, freeze) // the holder's own code is frozen as well
	s.stall.resume()
	if ctx.Err() != nil {
		s.release(l)
		return
	}
	if worksOn {
		s.workedOn(ctx, l, took)
		return
	}
	// Thawed: the lease knows the lock is gone.
	t := time.NewTimer(ttl)
	defer t.Stop()
	select {
	case <-l.Done():
		if errors.Is(l.Err(), lock.ErrLost) {
			s.lost.Add(1)
			s.log.Debug("workload: ledger sync thawed to a lost lock", "key", l.Key(), "err", l.Err())
			return
		}
	case <-t.C:
	case <-ctx.Done():
	}
	s.release(l)
}

// takeOver is the second ledger replica: it waits for the frozen one's lock
// to expire (at most while the freeze lasts), takes it and holds it until
// the frozen one has noticed.
func (s *Simulator) takeOver(ctx context.Context, key string, ttl, freeze time.Duration, noticed <-chan struct{}, took chan<- time.Time) {
	wctx, cancel := context.WithTimeout(ctx, freeze)
	l := s.obtain(wctx, key, ttl*4, &lock.ObtainOptions{
		Retry:   lock.LinearBackoff(max(ttl/20, time.Millisecond)),
		Owner:   "ledger-sync/pod-2",
		Fencing: true,
	})
	cancel()
	if l == nil {
		return
	}
	// Its sync writes the account first, with its fence.
	if err := s.guard.Set(ctx, key, l.Fence(), balanceKey(key), "pod-2"); err != nil {
		s.fail(ctx, "write", key, err)
	}
	took <- l.Since()
	select {
	case <-noticed:
	case <-ctx.Done():
	}
	ctxsleep.Sleep(ctx, ttl/4)
	s.release(l)
}

// deadlock is a transfer between a ledger and an account that two services
// lock in opposite orders: payments-api holds the ledger and waits for the
// account, ledger-sync holds the account and waits for the ledger (nested
// Do, so each wait names the lock its caller holds). Neither proceeds until
// their waits time out; then both retry later, in the same wrong order, and
// it happens again: once a minute.
func (s *Simulator) deadlock(ctx context.Context) {
	if !ctxsleep.Sleep(ctx, s.scaled(8*time.Second)) {
		return
	}
	ledger, account := s.key("payments:ledger"), s.key("payments:account-42")
	for {
		both := make(chan struct{})
		var ready, done sync.WaitGroup
		ready.Add(2)
		for _, p := range [][3]string{{"payments-api/pod-2", ledger, account}, {"ledger-sync/pod-1", account, ledger}} {
			done.Go(func() {
				s.attempts.Add(1)
				err := s.c.Do(inSpan(ctx), p[1], s.scaled(30*time.Second), &lock.ObtainOptions{Owner: p[0]}, func(lctx context.Context) error {
					s.acquired.Add(1)
					ready.Done()
					select {
					case <-both:
					case <-lctx.Done():
						return lctx.Err()
					case <-time.After(s.scaled(5 * time.Second)):
						return nil // the other service never got its first lock
					}
					wctx, cancel := context.WithTimeout(lctx, s.scaled(20*time.Second))
					defer cancel()
					s.attempts.Add(1)
					l, err := s.c.Obtain(wctx, p[2], s.scaled(30*time.Second), &lock.ObtainOptions{Owner: p[0], Retry: lock.LinearBackoff(s.scaled(200 * time.Millisecond))})
					if err != nil {
						s.timedOut.Add(1)
						return nil
					}
					s.acquired.Add(1)
					l.Release(context.WithoutCancel(ctx))
					s.released.Add(1)
					return nil
				})
				switch {
				case err == nil:
					s.released.Add(1)
				case ctx.Err() != nil:
				default:
					s.errs.Add(1)
				}
			})
		}
		go func() { ready.Wait(); close(both) }()
		done.Wait()
		s.deadlocks.Add(1)
		s.log.Debug("workload: deadlock between payments-api and ledger-sync resolved by timeout")
		if !ctxsleep.Sleep(ctx, s.scaled(40*time.Second)) {
			return
		}
	}
}

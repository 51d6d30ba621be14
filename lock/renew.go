package lock

import (
	"context"
	"time"

	"github.com/lockscope/lockscope/event"
)

// startRenewal starts the goroutine that renews the lock every ttl/3. It
// ends at Release or at the first sign the lock is lost.
func (l *Lease) startRenewal() {
	l.mu.Lock()
	l.initContext()
	l.stop = make(chan struct{})
	stop := l.stop
	l.mu.Unlock()
	go l.renewLoop(stop)
}

type refreshResult struct {
	ok  bool
	err error
}

func (l *Lease) renewLoop(stop <-chan struct{}) {
	l.mu.Lock()
	interval := l.ttl / 3
	l.mu.Unlock()
	t := time.NewTimer(l.untilMaxHold(interval))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if l.maxHold > 0 && time.Since(l.since) >= l.maxHold {
			l.lose(event.ReasonMaxHold)
			return
		}
		l.mu.Lock()
		ttl, validUntil := l.ttl, l.validUntil
		l.mu.Unlock()
		interval = ttl / 3

		// The refresh runs on its own goroutine so that the loop can give
		// up at validUntil even when the call cannot be interrupted (a hung
		// server, a client without ContextTimeoutEnabled): past that point
		// the lock may belong to someone else, and the work must stop.
		at := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), validUntil)
		done := make(chan refreshResult, 1)
		go func() {
			ok, err := l.refresh(ctx, ttl)
			done <- refreshResult{ok, err}
		}()
		t.Reset(time.Until(validUntil))
		var r refreshResult
		select {
		case <-stop:
			cancel()
			return
		case <-t.C:
			cancel()
			l.lose(event.ReasonError)
			return
		case r = <-done:
			cancel()
		}
		reply := time.Now()
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}

		next := interval
		switch {
		case r.err != nil:
			if l.c.rec != nil {
				e := l.event(event.RenewFailed)
				e.Reason = event.ReasonError
				l.c.record(e)
			}
			left := time.Until(validUntil)
			if left <= 0 {
				l.lose(event.ReasonError)
				return
			}
			next = min(interval, left) / 2 // transient: try again sooner
		case !r.ok:
			l.lose(event.ReasonNotOwner)
			return
		default:
			select {
			case <-stop: // released meanwhile: the renewal does not count
				return
			default:
			}
			l.renewed(at, reply, ttl)
		}
		t.Reset(l.untilMaxHold(next))
	}
}

// untilMaxHold shortens a wait so that the maximum hold is noticed on time.
func (l *Lease) untilMaxHold(d time.Duration) time.Duration {
	if l.maxHold > 0 {
		if left := time.Until(l.since.Add(l.maxHold)); left < d {
			return max(left, 0)
		}
	}
	return d
}

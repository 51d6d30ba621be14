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

		// One renewal may take at most one interval, so that a hung server
		// still leaves time for another try before the TTL lapses.
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		at := time.Now()
		ok, err := l.refresh(ctx, ttl)
		cancel()
		next := interval
		switch {
		case err != nil:
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
		case !ok:
			l.lose(event.ReasonNotOwner)
			return
		default:
			select {
			case <-stop: // released meanwhile: the renewal does not count
				return
			default:
			}
			l.renewed(at, ttl)
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

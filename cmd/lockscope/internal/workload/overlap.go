package workload

import (
	"context"
	"errors"
	"time"

	"github.com/lockscope/lockscope/lock"
)

// balanceKey is where the ledger sync writes the account its lock key
// protects: apart from the lock keys, so nothing takes it for a lock.
func balanceKey(lockKey string) string { return "lockscope:workload:balance:" + lockKey }

// workedOn is a thawed ledger sync whose code never looked at its lease: it
// writes the account it synced, though the second replica holds the lock
// now (took says since when, if it got it). The account's fence guard
// refuses the stale write. Two holders held the lock at once, from the
// second's acquisition to this write: the overlap is logged, at info level,
// as the ground truth lockscope's report is measured against.
func (s *Simulator) workedOn(ctx context.Context, l *lock.Lease, took <-chan time.Time) {
	err := s.guard.Set(ctx, l.Key(), l.Fence(), balanceKey(l.Key()), "pod-1")
	end := time.Now()
	select {
	case start := <-took:
		s.overlaps.Add(1)
		s.log.Info("workload: overlap", "key", l.Key(), "first", "ledger-sync/pod-1", "second", "ledger-sync/pod-2",
			"start", start.UTC().Format(time.RFC3339Nano), "end", end.UTC().Format(time.RFC3339Nano), "fenced", errors.Is(err, lock.ErrStaleFence))
	default:
		// The second replica never got the lock: one holder, and its
		// write went through.
	}
	s.release(l)
}

package dashboard

import (
	"context"
	"time"

	"github.com/lockscope/lockscope/collector/state"
)

// Querier is what the dashboard reads about the locks: the aggregation
// state (*state.Aggregator) answers it. Every method is safe for
// concurrent use, answers from memory and never waits on ingestion or on
// Redis.
type Querier interface {
	// Overview returns the headline figures.
	Overview() state.Overview
	// HotKeys returns up to n keys ranked by contentions or by total wait
	// within the last window (one of state.Windows).
	HotKeys(window time.Duration, by state.Ranking, n int) []state.HotKey
	// Locks returns one page of tracked keys matching q.
	Locks(q state.LockQuery) state.LockPage
	// Lock returns one tracked key's detail; ok is false if it is unknown.
	Lock(key string) (detail state.KeyDetail, ok bool)
	// Stuck returns the locks currently considered stuck, longest held first.
	Stuck() []state.LockInfo
	// Expirations returns the most recent expired-while-held locks, newest first.
	Expirations(n int) []state.Expiration
	// ForcedReleases returns the most recent forced releases, newest first.
	ForcedReleases(n int) []state.ForcedRelease
	// Blocking returns who waits on whom now, and the deadlocks.
	Blocking() state.Blocking
	// Deadlocks returns the deadlocks now (Blocking().Cycles), looking only
	// at waiting calls that hold leases: cheap enough for every page.
	Deadlocks() []state.Cycle
	// Classes returns the known lock classes, sorted.
	Classes() []string
	// LockOrder returns the lock-order graph (every class: "") and its
	// inversions, or those of one class.
	LockOrder(class string) state.LockOrder

	// ClassStats returns every class's figures within window (one of
	// state.Windows), sorted by class.
	ClassStats(window time.Duration) []state.ClassStats
	// ClassDetail returns one class's figures within window and its series
	// over the last five minutes; ok is false if the class is unknown.
	ClassDetail(window time.Duration, class string) (detail state.ClassDetail, ok bool)
	// Health reports ingestion state: nil when the consumer group is
	// reading, else why not (Redis unreachable, group missing, ...).
	Health() error
	// Overlaps returns the recent overlaps (two holders at once) of key,
	// newest first.
	Overlaps(key string) []state.Incident
}

var _ Querier = (*state.Aggregator)(nil)

// IncidentLister reads the incident history (the collector's
// *IncidentStore, kept in Redis and shared by every replica).
type IncidentLister interface {
	// List returns up to limit incidents, the most recently started first.
	List(ctx context.Context, limit int) ([]state.Incident, error)
}

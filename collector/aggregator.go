package collector

import (
	"sync"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/prometheus/client_golang/prometheus"
)

// Aggregator turns lock events into metrics, hot keys and per-key state, and
// answers the Querier interface.
type Aggregator struct {
	cfg    Config
	mu     sync.Mutex
	health error
}

var _ Querier = (*Aggregator)(nil)

// NewAggregator returns an Aggregator configured by cfg.
func NewAggregator(cfg Config) *Aggregator {
	return &Aggregator{cfg: cfg.withDefaults()}
}

// Apply aggregates decoded events. Strings in evs may share memory with the
// stream entry; Apply clones what it keeps.
func (a *Aggregator) Apply(evs []event.Event) {}

// Malformed counts n stream entries that could not be decoded.
func (a *Aggregator) Malformed(n int) {}

// KeyExpired records a keyspace notification: key expired now.
func (a *Aggregator) KeyExpired(key string) {}

// Tick runs expired-while-held and stuck detection.
func (a *Aggregator) Tick() {}

// SetHealth records the ingest state reported by Health.
func (a *Aggregator) SetHealth(err error) {
	a.mu.Lock()
	a.health = err
	a.mu.Unlock()
}

// SetStreamStats records the consumer group's lag and pending entries.
func (a *Aggregator) SetStreamStats(lag, pending int64) {}

// StreamGap counts entries trimmed from the stream before they were read.
func (a *Aggregator) StreamGap(missing int64) {}

// Register registers all lockscope_ metrics with reg.
func (a *Aggregator) Register(reg prometheus.Registerer) error { return nil }

func (a *Aggregator) Overview() Overview                                       { return Overview{} }
func (a *Aggregator) HotKeys(window time.Duration, by Ranking, n int) []HotKey { return nil }
func (a *Aggregator) Locks(q LockQuery) LockPage                               { return LockPage{} }
func (a *Aggregator) Lock(key string) (KeyDetail, bool)                        { return KeyDetail{}, false }
func (a *Aggregator) Stuck() []LockInfo                                        { return nil }
func (a *Aggregator) Expirations(n int) []Expiration                           { return nil }
func (a *Aggregator) ForcedReleases(n int) []ForcedRelease                     { return nil }
func (a *Aggregator) Classes() []string                                        { return nil }

// Health reports the ingest state set by SetHealth.
func (a *Aggregator) Health() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.health
}

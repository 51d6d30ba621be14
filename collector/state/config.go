package state

import "time"

// StuckRule sets the stuck threshold of the lock classes whose name matches
// Pattern, a glob in the grammar of ClassRule.Pattern matched against the
// class name: "edit:*" covers the class edit:* and edit:draft:* alike.
type StuckRule struct {
	Pattern string
	After   time.Duration // > 0
}

// Config tunes an Aggregator. Every zero value has a documented default.
type Config struct {
	// Classes are user rules, tried in order before the default derivation.
	Classes []ClassRule
	// MaxClasses caps the number of distinct classes; keys of further
	// classes count as class "other". 0 means 100.
	MaxClasses int
	// StuckAfter is how long a hold may last before it counts as stuck.
	// 0 means 5m.
	StuckAfter time.Duration
	// StuckRules override StuckAfter for the classes whose name matches:
	// the first matching rule sets the class's threshold. None: every class
	// has StuckAfter.
	StuckRules []StuckRule
	// ExpiryGrace is how long past its TTL (by the event clock) a hold must be
	// before it is declared expired without a keyspace notification. 0 means 1s.
	ExpiryGrace time.Duration
	// MaxKeys caps the keys with state in memory; the least recently active
	// keys that are not held are evicted first. 0 means 200_000.
	MaxKeys int
	// MaxBytes caps what the tracked keys keep beyond their fixed state:
	// their key, owner and lease strings, recent events, distributions and
	// superseded holds (see keyState.cost). Past it the least recently
	// active keys are evicted, as past MaxKeys: a stream of long strings
	// keeps fewer keys, never more memory. 0 means DefaultBytesPerKey per
	// MaxKeys.
	MaxBytes int
	// RecentEvents is the length of each key's ring of recent events.
	// 0 means 32; at most 32767.
	RecentEvents int
	// Now is the clock; nil means time.Now. Tests inject one.
	Now func() time.Time
	// Metrics receives the counts (the Prometheus export implements it).
	// nil counts nowhere.
	Metrics Metrics
	// Incidents receives the incident records the state derives (see
	// incidents.go); the collector's store keeps them in Redis. nil keeps
	// none (lockscope_incidents_total still counts them).
	Incidents IncidentSink
	// LockOrderWindow is how long an edge of the lock-order graph is kept
	// after it was last seen (lockorder.go). 0 means
	// DefaultLockOrderWindow.
	LockOrderWindow time.Duration
	// LockOrder receives the lock-order edges that changed; the
	// collector's store keeps them in Redis. nil keeps them in memory only.
	LockOrder LockOrderSink
}

// Defaults of Config.
const (
	DefaultMaxClasses   = 100
	DefaultStuckAfter   = 5 * time.Minute
	DefaultExpiryGrace  = time.Second
	DefaultMaxKeys      = 200_000
	DefaultBytesPerKey  = 384
	DefaultRecentEvents = 32
)

func (c Config) withDefaults() Config {
	if c.MaxClasses <= 0 {
		c.MaxClasses = DefaultMaxClasses
	}
	if c.StuckAfter <= 0 {
		c.StuckAfter = DefaultStuckAfter
	}
	if c.ExpiryGrace <= 0 {
		c.ExpiryGrace = DefaultExpiryGrace
	}
	if c.MaxKeys <= 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = c.MaxKeys * DefaultBytesPerKey
	}
	if c.RecentEvents <= 0 {
		c.RecentEvents = DefaultRecentEvents
	}
	c.RecentEvents = min(c.RecentEvents, 1<<15-1) // twice it fits keyState.recN
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.LockOrderWindow <= 0 {
		c.LockOrderWindow = DefaultLockOrderWindow
	}
	return c
}

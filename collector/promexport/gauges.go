package promexport

import (
	"time"
	"unicode/utf8"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event/class"
	"github.com/prometheus/client_golang/prometheus"
)

// The gauges that mirror the state are custom Collectors producing const
// metrics at scrape time, so a class or key that disappears from the state
// disappears from the exposition (client_golang's advice for state that
// lives elsewhere). They read it through State.

// State is what the mirrored gauges read at each scrape. *state.Aggregator
// is one.
type State interface {
	// ClassGauges returns every class's gauges now, sorted by class.
	ClassGauges() []state.ClassGauge
	// DeadlockCycles returns the cycles of the wait-for graph found by the
	// last scan.
	DeadlockCycles() int
	// LastEvent returns the time of the newest applied event; zero while
	// none is known (a replica that has just started, before its rebuild
	// has applied one).
	LastEvent() time.Time
	// HotTop returns the top n keys of window by ranking, and the window's
	// exact total of the ranked figure.
	HotTop(window time.Duration, by state.Ranking, n int) ([]state.HotKey, int64)
	// LockOrderInversions returns the lock-order inversions (class-order
	// cycles seen within the window) found by the last scan.
	LockOrderInversions() int
	// TrackedKeys returns the number of keys with state in memory now.
	TrackedKeys() int
	// LockOrderHolds returns the holds the lock-order graph knows by lease.
	LockOrderHolds() int
}

var _ State = (*state.Aggregator)(nil)

// stateCollector exports the per-class gauges mirrored from the aggregator's
// state. Collect holds the aggregator's lock for one pass over the classes
// (at most MaxClasses plus rule classes): microseconds.
type stateCollector struct {
	src                                                                               State
	held, waiters, oldestWait, cycles, stuck, stuckAfter, noExpiry, oldest, lastEvent *prometheus.Desc
	lockOrderInversions, trackedKeys, lockOrderHolds                                  *prometheus.Desc
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.held
	ch <- c.waiters
	ch <- c.oldestWait
	ch <- c.cycles
	ch <- c.stuck
	ch <- c.stuckAfter
	ch <- c.noExpiry
	ch <- c.oldest
	ch <- c.lastEvent
	ch <- c.lockOrderInversions
	ch <- c.trackedKeys
	ch <- c.lockOrderHolds
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.cycles, prometheus.GaugeValue, float64(c.src.DeadlockCycles()))
	ch <- prometheus.MustNewConstMetric(c.lockOrderInversions, prometheus.GaugeValue, float64(c.src.LockOrderInversions()))
	ch <- prometheus.MustNewConstMetric(c.trackedKeys, prometheus.GaugeValue, float64(c.src.TrackedKeys()))
	ch <- prometheus.MustNewConstMetric(c.lockOrderHolds, prometheus.GaugeValue, float64(c.src.LockOrderHolds()))
	// Absent, not 0, while no event is known: a restarted replica that
	// exported 0 before its rebuild looked 56 years stale for a scrape.
	if t := c.src.LastEvent(); !t.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.lastEvent, prometheus.GaugeValue, float64(t.UnixNano())/1e9)
	}
	for _, g := range c.src.ClassGauges() {
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(g.Held), g.Class)
		ch <- prometheus.MustNewConstMetric(c.waiters, prometheus.GaugeValue, float64(g.Waiters), g.Class)
		ch <- prometheus.MustNewConstMetric(c.oldestWait, prometheus.GaugeValue, float64(g.OldestWait)/1e9, g.Class)
		ch <- prometheus.MustNewConstMetric(c.stuck, prometheus.GaugeValue, float64(g.Stuck), g.Class)
		ch <- prometheus.MustNewConstMetric(c.stuckAfter, prometheus.GaugeValue, g.StuckAfter.Seconds(), g.Class)
		ch <- prometheus.MustNewConstMetric(c.noExpiry, prometheus.GaugeValue, float64(g.NoExpiry), g.Class)
		if g.Held > 0 && !g.OldestHold.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, float64(g.OldestHold.UnixNano())/1e9, g.Class)
		}
	}
}

// hotKeyCollector exports the top contended keys of the last 5 minutes as
// const metrics, so a key that leaves the top disappears at the next scrape.
type hotKeyCollector struct {
	src  State
	desc *prometheus.Desc
}

func (c *hotKeyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *hotKeyCollector) Collect(ch chan<- prometheus.Metric) {
	top, total := c.src.HotTop(5*time.Minute, state.ByContentions, 10)
	type label struct{ class, key string }
	vals := make(map[label]float64, len(top))
	order := make([]label, 0, len(top))
	var sum int64
	for _, h := range top {
		// Distinct keys can share a label after sanitising; merge them
		// rather than emit a duplicate series.
		l := label{labelValue(h.Class), labelValue(h.Key)}
		if _, ok := vals[l]; !ok {
			order = append(order, l)
		}
		vals[l] += float64(h.Contentions)
		sum += h.Contentions
	}
	for _, l := range order {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, vals[l], l.class, l.key)
	}
	rest := total - sum
	if rest < 0 {
		rest = 0 // the top figures are over-estimates
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(rest), hotKeyOther, hotKeyOther)
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}

// labelValue makes s a valid, bounded label value without control
// characters (an ESC in a key must not reach a terminal running
// `curl /metrics`): they become '?'.
func labelValue(s string) string {
	if len(s) <= maxKeyLabelLen && utf8.ValidString(s) && !hasControl(s) {
		return s
	}
	b, n := class.AppendSanitized(make([]byte, 0, maxKeyLabelLen+3), s, maxKeyLabelLen)
	if n < len(s) {
		b = append(b, "…"...)
	}
	return string(b)
}

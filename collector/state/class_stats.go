package state

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// The per-class view (lock_stat for a fleet): each class's figures within
// one of Windows, from its window buckets (class_window.go), its gauges now
// and the hot-key sketches (its most contended key, its busiest one).

// Summary is a distribution's figures: Avg is exact (the sum over the
// count), P50 and P99 are estimated as Distribution.Quantile does (never
// above Max, nor below the smallest observation), Max is the largest
// observation.
type Summary struct {
	Count              int64
	Avg, P50, P99, Max time.Duration
}

// TTLCount is a TTL holders set at acquisition and how many acquisitions
// set it (TTLs within a twentieth of each other count as one).
type TTLCount struct {
	TTL   time.Duration
	Count int64
}

// ClassStats are one lock class's figures within a window.
type ClassStats struct {
	Class  string
	Window time.Duration
	// Span is how much time the figures cover: the window, or less while
	// the collector (or the class) is younger than it.
	Span time.Duration

	Acquisitions int64
	// Passive are the acquisitions seen by the passive watch (another
	// library's locks): their wait is unknown, not zero. WaitsKnown is
	// false when every acquisition of the window was one and no failed
	// try was seen: the class's waits and contention are then unknown.
	Passive    int64
	WaitsKnown bool
	// Contentions are acquisitions that waited plus refused tries.
	Contentions int64
	// Failures are failed obtains by FailureReasons.
	Failures [len(FailureReasons)]int64
	// Wait is the wait of acquisitions and failed obtains (not of passive
	// acquisitions); Hold the holds that ended within the window.
	Wait, Hold Summary
	// TTLs are the TTLs set at acquisition, most set first (at most
	// ttlSlots a step); TTLOther counts acquisitions whose TTL found no
	// slot; NoTTL the watched acquisitions without a TTL.
	TTLs     []TTLCount
	TTLOther int64
	NoTTL    int64

	Expirations int64

	// Now, as the Prometheus gauges show them.
	Held, Waiters, Stuck, NoExpiry int

	// HotKey is the class's key with the most contentions in the window
	// (as Hot keys ranks them), or, for watched keys, the most acquired;
	// "" when none. HotKeyContentions are its contentions (an estimate
	// that only over-counts, see HotKey.Error).
	HotKey            string
	HotKeyContentions int64
	// Busiest is the class's contended key with the most hold time that
	// ended within the window (a lower bound: counted while the Hot keys
	// sketch tracked it), with its acquisitions, contentions and wait.
	Busiest BusyKey

	// What the advice reads (advice.go).
	GiveUpWait time.Duration // total wait of failed tries that gave up (reasons timeout and held)
	// Bare are the holds that ended without a renewal under a TTL: how
	// many, how many ran past nearTTLShare of it (an expiry does), their
	// distribution, and of those with a TTL of longTTL or more, how many
	// and how many ran past farTTLShare of it.
	Bare, BareNear           int64
	BareHold                 Summary
	LongTTLBare, LongTTLOver int64
	// Renewals are the renewals that reported their headroom; Late and
	// AtRisk those that left less than lateRenewal and riskRenewal of their
	// TTL; MinHeadroom the least any left, of a TTL of MinHeadroomOf.
	Renewals, RenewLate, RenewAtRisk int64
	MinHeadroom, MinHeadroomOf       time.Duration
}

// BusyKey is a key's hold time within a window, and its callers' wait.
type BusyKey struct {
	Key                       string
	Hold, Wait                time.Duration
	Acquisitions, Contentions int64
}

// Attempts are the acquisitions and failed obtains.
func (c ClassStats) Attempts() int64 {
	n := c.Acquisitions
	for _, f := range c.Failures {
		n += f
	}
	return n
}

// SuccessRatio is acquisitions over attempts; ok is false without any.
func (c ClassStats) SuccessRatio() (r float64, ok bool) {
	n := c.Attempts()
	if n == 0 {
		return 0, false
	}
	return float64(c.Acquisitions) / float64(n), true
}

// ClassStep is one ten-second step of a class's series.
type ClassStep struct {
	At                        time.Time // the step's start
	Acquisitions, Contentions int64
	Failures, Expirations     int64
	WaitP99, HoldP99          time.Duration
}

// ClassDetail is one class's figures within a window and its series over
// the last five minutes, one point per SeriesStep.
type ClassDetail struct {
	ClassStats
	StuckAfter time.Duration // the class's stuck threshold
	StuckRule  string        // the StuckRule pattern that set it; "" for the default
	Series     []ClassStep
	SeriesStep time.Duration
}

// ClassStats returns every class's figures within window (one of Windows;
// other values round up to the next), sorted by class.
func (a *Aggregator) ClassStats(window time.Duration) []ClassStats {
	window = normalizeWindow(window)
	names := *a.classNames.Load()
	out := make([]ClassStats, 0, len(names))
	for _, n := range names {
		if s, ok := a.classSum(n, window); ok {
			out = append(out, s)
		}
	}
	a.fillClassGauges(out)
	a.fillHotKeys(out, window)
	return out
}

// ClassDetail returns one class's figures within window and its series; ok
// is false if the class is unknown.
func (a *Aggregator) ClassDetail(window time.Duration, class string) (ClassDetail, bool) {
	window = normalizeWindow(window)
	s, ok := a.classSum(class, window)
	if !ok {
		return ClassDetail{}, false
	}
	one := []ClassStats{s}
	a.fillClassGauges(one)
	a.fillHotKeys(one, window)
	d := ClassDetail{ClassStats: one[0], SeriesStep: seriesStep}
	now := a.nowNS()
	a.mu.Lock()
	if c := a.classes[class]; c != nil {
		d.StuckAfter, d.StuckRule = c.stuckAfter, c.stuckRule
		d.Series = c.win.series(stepOf(now))
	}
	a.mu.Unlock()
	return d, true
}

// classSum merges one class's buckets of window, under a.mu for that class
// alone: a reader of every class lets ingestion in between classes.
func (a *Aggregator) classSum(name string, window time.Duration) (ClassStats, bool) {
	now := a.nowNS()
	a.mu.Lock()
	c := a.classes[name]
	if c == nil {
		a.mu.Unlock()
		return ClassStats{}, false
	}
	s, start := c.win.sum(window, stepOf(now))
	a.mu.Unlock()
	out := ClassStats{
		Class: name, Window: window, Span: time.Duration(max(now-start, 0)),
		Acquisitions: s.acq, Passive: s.passive, Contentions: s.cont, Failures: s.fail,
		Wait: s.wait.summary(), Hold: s.hold.summary(),
		TTLOther: s.ttlOther, NoTTL: s.noTTL, Expirations: s.expirations,
		GiveUpWait: time.Duration(s.giveUpWait),
		Bare:       s.bareN, BareNear: s.bareNear, BareHold: s.bare.summary(),
		LongTTLBare: s.longBare, LongTTLOver: s.longO,
		Renewals: s.renewals, RenewLate: s.renewLate, RenewAtRisk: s.renewRisk,
		MinHeadroom: time.Duration(s.minHeadroom), MinHeadroomOf: time.Duration(s.minOf),
	}
	// Unknown when every acquisition was a watched one and no instrumented
	// client said it failed: nothing shows the class's callers wait.
	out.WaitsKnown = s.acq == 0 || s.acq > s.passive || out.Attempts() > s.acq || s.cont > 0
	out.TTLs = s.ttls
	slices.SortStableFunc(out.TTLs, func(x, y TTLCount) int {
		if c := cmp.Compare(y.Count, x.Count); c != 0 {
			return c
		}
		return cmp.Compare(x.TTL, y.TTL)
	})
	if len(out.TTLs) > ttlSlots {
		for _, t := range out.TTLs[ttlSlots:] {
			out.TTLOther += t.Count
		}
		out.TTLs = out.TTLs[:ttlSlots]
	}
	return out, true
}

// fillClassGauges sets the figures of now.
func (a *Aggregator) fillClassGauges(out []ClassStats) {
	gs := a.ClassGauges()
	for i := range out {
		j, ok := slices.BinarySearchFunc(gs, out[i].Class, func(g ClassGauge, n string) int { return strings.Compare(g.Class, n) })
		if ok {
			g := gs[j]
			out[i].Held, out[i].Waiters, out[i].Stuck, out[i].NoExpiry = g.Held, g.Waiters, g.Stuck, g.NoExpiry
		}
	}
}

// fillHotKeys sets each class's hot key and busiest key from the hot-key
// sketches of window.
func (a *Aggregator) fillHotKeys(out []ClassStats, window time.Duration) {
	idx := make(map[string]int, len(out))
	for i := range out {
		idx[out[i].Class] = i
	}
	top, _ := a.HotTop(window, ByContentions, hotCapacity)
	for _, h := range top {
		i, ok := idx[h.Class]
		if !ok {
			continue
		}
		c := &out[i]
		if c.HotKey == "" {
			c.HotKey, c.HotKeyContentions = h.Key, h.Contentions
		}
		if h.Hold > c.Busiest.Hold {
			c.Busiest = BusyKey{Key: h.Key, Hold: h.Hold, Wait: h.Wait, Acquisitions: h.Acquisitions, Contentions: h.Contentions}
		}
	}
	passive, _ := a.HotTop(window, byPassive, hotCapacity)
	for _, h := range passive {
		if i, ok := idx[h.Class]; ok && out[i].HotKey == "" {
			out[i].HotKey = h.Key
		}
	}
}

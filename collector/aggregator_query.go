package collector

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// This file answers the Querier interface. Every method copies what it
// needs under short locks (see Aggregator) and does the rest outside them.

// Query limits.
const (
	defaultPageSize = 50
	maxPageSize     = 500
	defaultHotKeys  = 10
)

// clocks returns the collector's clock and the event clock.
func (a *Aggregator) clocks() (now, clock int64) {
	now = a.nowNS()
	a.mu.Lock()
	clock = a.eventClock(now)
	a.mu.Unlock()
	return now, clock
}

// infoLocked builds k's LockInfo; the caller holds k's shard lock.
func infoLocked(k *keyState, now, clock int64) LockInfo {
	li := LockInfo{
		Key: k.key, Class: k.class.name, Held: k.held, Owner: k.owner, Lease: k.lease,
		TTL: k.ttl, Fence: k.fence, Degraded: k.degraded, Passive: k.passive,
		Acquisitions: k.acquisitions, Contentions: k.contentions, Failures: k.failures,
		WaitTotal: time.Duration(k.waitTotal), HoldTotal: time.Duration(k.holdTotal),
	}
	if k.lastEvent > 0 {
		li.LastEvent = time.Unix(0, k.lastEvent)
	}
	if k.held {
		li.Since = time.Unix(0, k.since)
		if k.expiresAt > 0 {
			li.ExpiresAt = time.Unix(0, k.expiresAt)
		}
		li.Stuck = clock-k.since > int64(k.class.stuckAfter)
	}
	if k.stats != nil {
		li.Waiters = int(math.Round(k.stats.waiter.mean(now)))
	}
	return li
}

// Overview returns the headline figures.
func (a *Aggregator) Overview() Overview {
	now := a.nowNS()
	a.mu.Lock()
	a.advanceLocked(now)
	cur := stepOf(now)
	steps := make([]stepStats, overviewSeriesLen)
	for i := range steps {
		if s := a.steps.get(cur - overviewSeriesLen + 1 + int64(i)); s != nil {
			steps[i] = *s
		}
	}
	o := Overview{
		At:          time.Unix(0, now),
		EventsTotal: a.eventsTotal,
		Dropped:     a.dropped,
		SeriesStep:  seriesStep,
	}
	if a.evMax > 0 {
		o.LastEvent = time.Unix(0, a.evMax)
	}
	var waiters float64
	for _, c := range a.classes {
		o.Held += c.held
		o.Stuck += c.stuck
		waiters += c.waiters.mean(now)
	}
	a.mu.Unlock()

	o.Waiters = int(math.Round(waiters))
	o.Malformed = a.malformed.Load()
	o.TrackedKeys = int(a.tracked.Load())
	o.AcquireSeries = make([]float64, overviewSeriesLen)
	o.ContentionSeries = make([]float64, overviewSeriesLen)
	var lastMin stepStats
	var wait5, hold5 qhist
	for i, s := range steps {
		o.AcquireSeries[i] = float64(s.acquisitions) / seriesStep.Seconds()
		o.ContentionSeries[i] = float64(s.contentions) / seriesStep.Seconds()
		if i >= overviewSeriesLen-waiterSteps {
			lastMin.acquisitions += s.acquisitions
			lastMin.contentions += s.contentions
			lastMin.refused += s.refused
		}
		if i >= overviewSeriesLen-30 {
			o.Expirations5m += s.expirations
			o.Forced5m += s.forced
			o.Failures5m += s.failures
			for j := range s.wait {
				wait5[j] += s.wait[j]
				hold5[j] += s.hold[j]
			}
		}
	}
	// The last minute is the current step and the five before it.
	if span := now - (cur-waiterSteps+1)*int64(seriesStep); span > 0 {
		o.AcquireRate = float64(lastMin.acquisitions) / (float64(span) / 1e9)
	}
	if d := lastMin.acquisitions + lastMin.refused; d > 0 {
		o.ContentionRatio = min(1, float64(lastMin.contentions)/float64(d))
	}
	o.WaitP99 = wait5.quantile(0.99)
	o.HoldP99 = hold5.quantile(0.99)
	return o
}

// HotKeys returns up to n keys (0 means 10) ranked by contentions or by
// total wait within window (one of Windows; other values round up to the
// next window).
func (a *Aggregator) HotKeys(window time.Duration, by Ranking, n int) []HotKey {
	if n <= 0 {
		n = defaultHotKeys
	}
	top, _ := a.hotTop(window, by, min(n, hotCapacity))
	return top
}

// lockCand is a key matching a LockQuery, with its sort figures.
type lockCand struct {
	key  string
	a, b int64
}

// candPool recycles candidate slices: a query over 100 000 keys would
// otherwise allocate megabytes each time.
var candPool = sync.Pool{New: func() any { return new([]lockCand) }}

// Locks returns one page of tracked keys matching q.
func (a *Aggregator) Locks(q LockQuery) LockPage {
	limit := q.Limit
	if limit <= 0 {
		limit = defaultPageSize
	}
	limit = min(limit, maxPageSize)
	offset := max(q.Offset, 0)
	sortBy := q.Sort
	if sortBy == "" {
		sortBy = SortContentions
	}
	now, clock := a.clocks()

	buf := candPool.Get().(*[]lockCand)
	defer func() {
		clear(*buf) // drop key references before pooling
		candPool.Put(buf)
	}()
	cands := (*buf)[:0]
	consider := func(k *keyState) bool {
		if q.Class != "" && k.class.name != q.Class {
			return true
		}
		if q.HeldOnly && !k.held {
			return true
		}
		if q.Search != "" && !strings.Contains(k.key, q.Search) && !strings.Contains(k.owner, q.Search) {
			return true
		}
		c := lockCand{key: k.key}
		switch sortBy {
		case SortWait:
			c.a = k.waitTotal
		case SortHold:
			if k.held {
				c.a = clock - k.since
			}
			c.b = k.holdTotal
		case SortKey:
		default:
			c.a = k.contentions
		}
		cands = append(cands, c)
		return true
	}
	for i := range a.keys.shards {
		sh := &a.keys.shards[i]
		sh.mu.Lock()
		if q.HeldOnly {
			sh.held.each(consider)
		} else {
			for _, k := range sh.m {
				consider(k)
			}
		}
		sh.mu.Unlock()
	}
	*buf = cands

	var less func(x, y lockCand) int
	if sortBy == SortKey {
		less = func(x, y lockCand) int { return strings.Compare(x.key, y.key) }
	} else {
		dir := -1 // descending by default
		if q.Asc {
			dir = 1
		}
		less = func(x, y lockCand) int {
			if c := cmp.Compare(x.a, y.a); c != 0 {
				return dir * c
			}
			if c := cmp.Compare(x.b, y.b); c != 0 {
				return dir * c
			}
			return strings.Compare(x.key, y.key)
		}
	}
	page := LockPage{Total: len(cands)}
	if offset >= len(cands) {
		return page
	}
	top := selectTop(cands, offset+limit, less)
	top = top[offset:min(len(top), offset+limit)]
	page.Locks = make([]LockInfo, 0, len(top))
	for _, c := range top {
		sh := a.keys.shardOf(c.key)
		sh.mu.Lock()
		if k := sh.m[c.key]; k != nil {
			page.Locks = append(page.Locks, infoLocked(k, now, clock))
		}
		sh.mu.Unlock()
	}
	return page
}

// selectTop returns the first n of cands in order less, sorted. For a small
// n out of many it keeps a bounded heap instead of sorting everything.
func selectTop(cands []lockCand, n int, less func(x, y lockCand) int) []lockCand {
	if n*2 >= len(cands) {
		slices.SortFunc(cands, less)
		return cands[:min(n, len(cands))]
	}
	// h is a heap with the worst kept candidate at the root.
	h := make([]lockCand, 0, n)
	worse := func(i, j int) bool { return less(h[i], h[j]) > 0 }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			m := l
			if r := l + 1; r < len(h) && worse(r, l) {
				m = r
			}
			if !worse(m, i) {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for _, c := range cands {
		if len(h) < n {
			h = append(h, c)
			for i := len(h) - 1; i > 0; {
				p := (i - 1) / 2
				if !worse(i, p) {
					break
				}
				h[i], h[p] = h[p], h[i]
				i = p
			}
			continue
		}
		if less(c, h[0]) < 0 {
			h[0] = c
			down(0)
		}
	}
	slices.SortFunc(h, less)
	return h
}

// Lock returns one tracked key's detail; ok is false if it is unknown.
func (a *Aggregator) Lock(key string) (KeyDetail, bool) {
	now, clock := a.clocks()
	sh := a.keys.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.m[key]
	if k == nil {
		return KeyDetail{}, false
	}
	d := KeyDetail{LockInfo: infoLocked(k, now, clock), Recent: k.newest(), SeriesStep: seriesStep}
	s := k.stats
	if s == nil {
		s = &keyStats{}
	}
	d.Wait, d.Hold = s.wait.export(), s.hold.export()
	d.AcquireSeries = s.series(now)
	return d, true
}

// Stuck returns the locks held past their class's stuck threshold, longest
// held first.
func (a *Aggregator) Stuck() []LockInfo {
	now, clock := a.clocks()
	var out []LockInfo
	for i := range a.keys.shards {
		sh := &a.keys.shards[i]
		sh.mu.Lock()
		sh.held.each(func(k *keyState) bool {
			if clock-k.since > int64(k.class.stuckAfter) {
				out = append(out, infoLocked(k, now, clock))
			}
			return true
		})
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(x, y LockInfo) int {
		if c := x.Since.Compare(y.Since); c != 0 {
			return c
		}
		return strings.Compare(x.Key, y.Key)
	})
	return out
}

// Expirations returns up to n (0 means all kept, at most 256) of the most
// recent expired-while-held locks, newest first.
func (a *Aggregator) Expirations(n int) []Expiration {
	if n <= 0 {
		n = ringLen
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.exps.newest(n)
}

// ForcedReleases returns up to n (0 means all kept, at most 256) of the most
// recent forced releases, newest first.
func (a *Aggregator) ForcedReleases(n int) []ForcedRelease {
	if n <= 0 {
		n = ringLen
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.forced.newest(n)
}

// Classes returns the known lock classes, sorted.
func (a *Aggregator) Classes() []string {
	return slices.Clone(*a.classNames.Load())
}

// classGauge is one class's mirrored gauges.
type classGauge struct {
	class   string
	held    int
	waiters float64
	stuck   int
	oldest  int64
}

func (a *Aggregator) classGauges() []classGauge {
	now := a.nowNS()
	a.mu.Lock()
	a.advanceLocked(now)
	out := make([]classGauge, 0, len(a.classes))
	for _, c := range a.classes {
		out = append(out, classGauge{class: c.name, held: c.held, waiters: c.waiters.mean(now), stuck: c.stuck, oldest: c.oldest})
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y classGauge) int { return strings.Compare(x.class, y.class) })
	return out
}

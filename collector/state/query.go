package state

import (
	"cmp"
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
func infoLocked(k *keyState, now, clock int64, w *waits) LockInfo {
	li := LockInfo{
		Key: k.key, Class: k.class.name, Held: k.held, Owner: k.owner, Lease: k.lease,
		TTL: k.ttl, Fence: k.fence, Degraded: k.degraded, Passive: k.passive,
		StuckAfter: k.class.stuckAfter, StuckRule: k.class.stuckRule,
		Acquisitions: k.acquisitions, Contentions: k.contentions, Failures: k.failures,
		WaitTotal: time.Duration(k.waitTotal), HoldTotal: time.Duration(k.holdTotal), Trace: k.trace,
		LastHeadroom: headroomOf(k.headroomLast), MinHeadroom: headroomOf(k.headroomMin),
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
	li.Waiters = w.count(k.key)
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
	for _, c := range a.classes {
		o.Held += c.held
		o.Stuck += c.stuck
		o.NoExpiry += c.noExpiry
	}
	a.mu.Unlock()

	o.Waiters = a.waits.total()
	o.Malformed = a.malformed.Load()
	o.TrackedKeys = int(a.tracked.Load())
	o.AcquireSeries = make([]float64, overviewSeriesLen)
	o.ContentionSeries = make([]float64, overviewSeriesLen)
	var lastMin stepStats
	var wait5, hold5 qhist
	for i, s := range steps {
		o.AcquireSeries[i] = float64(s.acquisitions) / seriesStep.Seconds()
		o.ContentionSeries[i] = float64(s.contentions) / seriesStep.Seconds()
		if i >= overviewSeriesLen-minuteSteps {
			lastMin.acquisitions += s.acquisitions
			lastMin.passive += s.passive
			lastMin.contentions += s.contentions
			lastMin.refused += s.refused
		}
		if i >= overviewSeriesLen-30 {
			o.Expirations5m += s.expirations
			o.ExpiredWorking5m += s.expiredWorking
			o.Overlaps5m += s.overlaps
			o.Forced5m += s.forced
			o.Failures5m += s.failures
			o.Refused5m += s.refused
			wait5.merge(&s.wait)
			hold5.merge(&s.hold)
		}
	}
	// The last minute is the current step and the five before it.
	if span := now - (cur-minuteSteps+1)*int64(seriesStep); span > 0 {
		o.AcquireRate = float64(lastMin.acquisitions) / (float64(span) / 1e9)
	}
	if d := lastMin.acquisitions - lastMin.passive + lastMin.refused; d > 0 {
		o.ContentionRatio = min(1, float64(lastMin.contentions)/float64(d))
	}
	// An expiration found to be under a working holder is counted in the
	// step its holder spoke, which may be just after the window's first.
	o.ExpiredWorking5m = min(o.ExpiredWorking5m, o.Expirations5m)
	o.WaitP99, o.WaitMax = wait5.quantile(0.99), time.Duration(wait5.max)
	o.HoldP99, o.HoldMax = hold5.quantile(0.99), time.Duration(hold5.max)
	return o
}

// HotKeys returns up to n keys (0 means 10) ranked by contentions or by
// total wait within window (one of Windows; other values round up to the
// next window), then, to fill n, the watched keys of unknown contention
// (ContentionUnknown) not ranked already, by their acquisitions.
func (a *Aggregator) HotKeys(window time.Duration, by Ranking, n int) []HotKey {
	if n <= 0 {
		n = defaultHotKeys
	}
	n = min(n, hotCapacity)
	top, _ := a.HotTop(window, by, n)
	if len(top) == n {
		return top
	}
	passive, _ := a.HotTop(window, byPassive, n)
	for _, p := range passive {
		if len(top) == n {
			break
		}
		if !slices.ContainsFunc(top, func(h HotKey) bool { return h.Key == p.Key }) {
			top = append(top, p)
		}
	}
	return top
}

// lockCand is a key matching a LockQuery, with its sort figures: a, then
// b, in the query's direction, then the key ascending (kp first, so that
// most ties are decided without reading the key's bytes).
type lockCand struct {
	a, b int64
	kp   prefix
	key  string
}

// candPool recycles candidate slices: a query over 100 000 keys would
// otherwise allocate megabytes each time.
var candPool = sync.Pool{New: func() any { return new([]lockCand) }}

// Locks returns one page of tracked keys matching q.
//
// It is a scan, not an index: every query visits every tracked key, one
// shard at a time under that shard's lock, reading the sort figures from the
// shard's slabs in memory order (about 3 ns per key), and selects the page
// outside the locks. The figures are the live ones, so a key acquired a
// moment ago sorts and shows as held on the next query; no snapshot can be
// stale. The cost is O(keys) per query: about 1 ms for 100 000 keys, a few
// more for a search, which reads each key's bytes.
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
	now := a.nowNS()
	a.mu.Lock()
	clock := a.eventClock(now)
	var class *classState
	if q.Class != "" {
		class = a.classes[q.Class]
	}
	a.mu.Unlock()
	if q.Class != "" && class == nil {
		return LockPage{}
	}
	// The waiters of each key, read once rather than under the waiters'
	// lock for every held key of the scan.
	var waiting map[string]int
	if q.State == StateWaited || sortBy == SortAttention {
		waiting = a.waits.counts()
	}

	buf := candPool.Get().(*[]lockCand)
	defer func() {
		clear(*buf) // drop key references before pooling
		candPool.Put(buf)
	}()
	cands := (*buf)[:0]
	consider := func(k *keyState) {
		if class != nil && k.class != class || q.HeldOnly && !k.held {
			return
		}
		switch q.State {
		case StateHeld:
			if !k.held {
				return
			}
		case StateStuck:
			if !k.held || clock-k.since <= int64(k.class.stuckAfter) {
				return
			}
		case StateWaited:
			if !k.held || waiting[k.key] == 0 {
				return
			}
		case StateNoExpiry:
			if !k.held || !k.passive || k.ttl > 0 || k.expiresAt != 0 {
				return
			}
		case StateFree:
			if k.held {
				return
			}
		}
		if q.Owner != "" && k.owner != q.Owner {
			return
		}
		if q.Search != "" && !strings.Contains(k.key, q.Search) && !strings.Contains(k.owner, q.Search) {
			return
		}
		c := lockCand{kp: k.kp, key: k.key}
		switch sortBy {
		case SortWait:
			c.a = k.waitTotal
		case SortHold:
			if k.held {
				c.a = clock - k.since
			}
			c.b = k.holdTotal
		case SortKey:
		case SortAttention:
			switch {
			case k.held && clock-k.since > int64(k.class.stuckAfter):
				c.a = 3
			case k.held && waiting[k.key] > 0:
				c.a = 2
			case k.held:
				c.a = 1
			}
			c.b = k.contentions
		default:
			c.a = k.contentions
		}
		cands = append(cands, c)
	}
	for i := range a.keys.shards {
		sh := &a.keys.shards[i]
		sh.mu.Lock()
		sh.each(consider)
		sh.mu.Unlock()
	}
	*buf = cands

	page := LockPage{Total: len(cands)}
	if offset >= len(cands) {
		return page
	}
	order := byFigures
	switch {
	case sortBy == SortKey:
		order = byKey
	case q.Asc:
		order = byFiguresAsc
	}
	top := selectRange(cands, offset, min(offset+limit, len(cands)), order)
	page.Locks = make([]LockInfo, 0, len(top))
	for _, c := range top {
		sh, h := a.keys.find(c.key)
		sh.mu.Lock()
		if k := sh.get(h, c.key); k != nil {
			page.Locks = append(page.Locks, infoLocked(k, now, clock, &a.waits))
		}
		sh.mu.Unlock()
	}
	return page
}

// candOrder is the order of a page: a switch rather than a func value, so
// that the comparisons inline and their operands stay on the stack.
type candOrder uint8

const (
	byFigures    candOrder = iota // a, b descending, then key
	byFiguresAsc                  // a, b ascending, then key
	byKey                         // key ascending
)

func (o candOrder) cmp(x, y *lockCand) int {
	if o != byKey {
		if x.a != y.a {
			if o == byFiguresAsc {
				return cmp.Compare(x.a, y.a)
			}
			return cmp.Compare(y.a, x.a)
		}
		if x.b != y.b {
			if o == byFiguresAsc {
				return cmp.Compare(x.b, y.b)
			}
			return cmp.Compare(y.b, x.b)
		}
	}
	if c := x.kp.compare(y.kp); c != 0 {
		return c
	}
	return strings.Compare(x.key, y.key)
}

func (o candOrder) sort(s []lockCand) {
	slices.SortFunc(s, func(x, y lockCand) int { return o.cmp(&x, &y) })
}

// selectRange returns cands[from:to] as they would be after sorting cands
// by o, sorted, without sorting the rest: a bounded heap when the range
// starts near the front, else quickselect (linear on average) around the
// range. The order is total: keys are distinct. cands is reordered.
func selectRange(cands []lockCand, from, to int, o candOrder) []lockCand {
	if to <= from {
		return nil
	}
	if to*64 <= len(cands) {
		return selectTop(cands, to, o)[from:]
	}
	nth(cands, from, o)
	rest := cands[from:]
	nth(rest, to-from, o)
	out := rest[:to-from]
	o.sort(out)
	return out
}

// nth reorders s so that s[:k] holds the k smallest elements by o (in no
// particular order) and s[k:] the rest. It is Hoare's quickselect with a
// median-of-three pivot, falling back to a sort on pathological input.
func nth(s []lockCand, k int, o candOrder) {
	lo, hi := 0, len(s) // the boundary k lies in [lo, hi]
	for budget := 64; hi-lo > 16 && k > lo && k < hi; budget-- {
		if budget == 0 {
			o.sort(s[lo:hi])
			return
		}
		m := lo + (hi-lo)/2
		// Order s[lo], s[m], s[hi-1]; the median becomes the pivot at lo.
		if o.cmp(&s[m], &s[lo]) < 0 {
			s[m], s[lo] = s[lo], s[m]
		}
		if o.cmp(&s[hi-1], &s[m]) < 0 {
			s[hi-1], s[m] = s[m], s[hi-1]
			if o.cmp(&s[m], &s[lo]) < 0 {
				s[m], s[lo] = s[lo], s[m]
			}
		}
		s[lo], s[m] = s[m], s[lo]
		p := s[lo]
		i, j := lo+1, hi-1
		for {
			for i <= j && o.cmp(&s[i], &p) < 0 {
				i++
			}
			for i <= j && o.cmp(&s[j], &p) > 0 {
				j--
			}
			if i >= j {
				break
			}
			s[i], s[j] = s[j], s[i]
			i++
			j--
		}
		// s[lo+1:i] < p, s[j+1:hi] > p; put the pivot at j.
		s[lo], s[j] = s[j], s[lo]
		switch {
		case k <= j:
			hi = j
		default:
			lo = j + 1
		}
	}
	if hi-lo > 1 && k > lo && k < hi {
		o.sort(s[lo:hi])
	}
}

// selectTop returns the first n of cands in order o, sorted, keeping a
// bounded heap of the best n seen.
func selectTop(cands []lockCand, n int, o candOrder) []lockCand {
	// h is a heap with the worst kept candidate at the root.
	h := make([]lockCand, 0, n)
	worse := func(i, j int) bool { return o.cmp(&h[i], &h[j]) > 0 }
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
	for i := range cands {
		c := &cands[i]
		if len(h) < n {
			h = append(h, *c)
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
		if o.cmp(c, &h[0]) < 0 {
			h[0] = *c
			down(0)
		}
	}
	o.sort(h)
	return h
}

// Lock returns one tracked key's detail; ok is false if it is unknown.
func (a *Aggregator) Lock(key string) (KeyDetail, bool) {
	now, clock := a.clocks()
	sh, h := a.keys.find(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.get(h, key)
	if k == nil {
		return KeyDetail{}, false
	}
	d := KeyDetail{LockInfo: infoLocked(k, now, clock, &a.waits), Recent: k.newest(&a.tab, a.cfg.RecentEvents), SeriesStep: seriesStep}
	var tmp keyStats
	s := k.statsView(&tmp)
	d.Wait, d.Hold = s.wait.export(), s.hold.export()
	d.AcquireSeries = s.series(now)
	for _, x := range a.waits.keyWaiters(key, maxWaitersNow) {
		d.WaitersNow = append(d.WaitersNow, x.export())
	}
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
				out = append(out, infoLocked(k, now, clock, &a.waits))
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

// Deadlocks returns the cycles of the wait-for graph now, as
// Blocking().Cycles does, built from the waiting calls that hold leases only.
func (a *Aggregator) Deadlocks() []Cycle {
	ws := a.waits.snapshotHolding()
	if len(ws) == 0 {
		return nil
	}
	g := buildGraph(ws, a.holderOf)
	var out []Cycle
	for _, c := range g.cycles() {
		out = append(out, g.cycleOf(c))
	}
	return out
}

// Blocking returns who waits on whom now (see waiters.go).
func (a *Aggregator) Blocking() Blocking {
	now := a.nowNS()
	ws := a.waits.snapshot()
	g := buildGraph(ws, a.holderOf)
	b := Blocking{At: time.Unix(0, now), Waiters: len(ws)}
	byKey := make(map[string]*BlockingHolder)
	var keys []string
	waitsToo := make(map[string]bool) // leases held by a waiting call
	for _, x := range ws {
		for _, l := range x.held {
			waitsToo[l] = true
		}
	}
	pointedAt := make([]bool, len(ws))
	for i, x := range ws {
		h := byKey[x.key]
		if h == nil {
			hd := g.hold[i]
			h = &BlockingHolder{Key: x.key, Class: x.class, Owner: hd.owner, Lease: hd.lease, Trace: hd.trace,
				Waiting: hd.held && waitsToo[hd.lease]}
			if !hd.held {
				h.Owner = x.holder
			} else {
				h.Since = time.Unix(0, hd.since)
			}
			byKey[x.key] = h
			keys = append(keys, x.key)
		}
		h.Waiters++
		h.WaitSeconds += float64(max(now-x.since, 0)) / 1e9
		if g.next[i] >= 0 {
			pointedAt[g.next[i]] = true
		}
	}
	for _, k := range keys {
		b.Holders = append(b.Holders, *byKey[k])
	}
	b.HoldersTotal = len(b.Holders)
	slices.SortFunc(b.Holders, func(x, y BlockingHolder) int {
		if c := cmp.Compare(y.Waiters, x.Waiters); c != 0 {
			return c
		}
		if c := cmp.Compare(y.WaitSeconds, x.WaitSeconds); c != 0 {
			return c
		}
		return strings.Compare(x.Key, y.Key)
	})
	b.Holders = b.Holders[:min(len(b.Holders), maxBlocking)]
	for i := range ws {
		if pointedAt[i] || g.next[i] < 0 {
			continue // not the head of a chain of two or more waiting calls
		}
		path := g.chain(i)
		var c Chain
		for _, j := range path {
			c.Links = append(c.Links, ChainLink{Owner: ws[j].owner, Lease: ws[j].lease, WaitsFor: ws[j].key,
				Since: time.Unix(0, ws[j].since), Trace: ws[j].trace})
		}
		if last := path[len(path)-1]; g.next[last] < 0 && g.hold[last].held {
			hd := g.hold[last]
			c.Links = append(c.Links, ChainLink{Owner: hd.owner, Lease: hd.lease, Since: time.Unix(0, hd.since), Trace: hd.trace})
		} else if g.next[last] >= 0 {
			c.Cycle = true
		}
		b.Chains = append(b.Chains, c)
	}
	slices.SortStableFunc(b.Chains, func(x, y Chain) int { return cmp.Compare(len(y.Links), len(x.Links)) })
	b.Chains = b.Chains[:min(len(b.Chains), maxBlocking)]
	cycles := g.cycles()
	b.CyclesTotal = len(cycles)
	for _, c := range cycles[:min(len(cycles), maxBlocking)] {
		b.Cycles = append(b.Cycles, g.cycleOf(c))
		ch := Chain{Cycle: true}
		for _, j := range c {
			ch.Links = append(ch.Links, ChainLink{Owner: ws[j].owner, Lease: ws[j].lease, WaitsFor: ws[j].key,
				Since: time.Unix(0, ws[j].since), Trace: ws[j].trace})
		}
		b.Chains = append(b.Chains, ch)
	}
	return b
}

// holderOf returns key's current holder.
func (a *Aggregator) holderOf(key string) holding {
	sh, h := a.keys.find(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.get(h, key)
	if k == nil || !k.held {
		return holding{}
	}
	return holding{lease: k.lease, owner: k.owner, since: k.since, held: true, trace: k.trace}
}

// ClassGauge is one class's figures now, as the gauges of the Prometheus
// export show them.
type ClassGauge struct {
	Class      string
	Held       int           // locks held now
	Waiters    int           // callers waiting now
	OldestWait time.Duration // how long the longest current waiter has waited; 0 when none waits
	Stuck      int           // holds past the class's stuck threshold (at the last Tick)
	StuckAfter time.Duration // the class's stuck threshold
	NoExpiry   int           // holds without a TTL (at the last Tick)
	OldestHold time.Time     // start of the oldest current hold (at the last Tick); zero if none
}

// ClassGauges returns every class's gauges now, sorted by class.
func (a *Aggregator) ClassGauges() []ClassGauge {
	now := a.nowNS()
	ws := a.waits.snapshot()
	a.mu.Lock()
	if a.replaying == 0 {
		a.advanceLocked(now)
	}
	out := make([]ClassGauge, 0, len(a.classes))
	oldest := make([]int64, 0, len(a.classes)) // start of the longest wait, unix ns (0: none)
	idx := make(map[string]int, len(a.classes))
	for _, c := range a.classes {
		idx[c.name] = len(out)
		g := ClassGauge{Class: c.name, Held: c.held, Stuck: c.stuck, StuckAfter: c.stuckAfter, NoExpiry: c.noExpiry}
		if c.oldest > 0 {
			g.OldestHold = time.Unix(0, c.oldest)
		}
		out = append(out, g)
		oldest = append(oldest, 0)
	}
	a.mu.Unlock()
	for _, x := range ws {
		if i, ok := idx[x.class]; ok {
			out[i].Waiters++
			if oldest[i] == 0 || x.since < oldest[i] {
				oldest[i] = x.since
			}
		}
	}
	for i, since := range oldest {
		if since > 0 {
			out[i].OldestWait = time.Duration(max(now-since, 0))
		}
	}
	slices.SortFunc(out, func(x, y ClassGauge) int { return strings.Compare(x.Class, y.Class) })
	return out
}

// LastEvent returns the time of the newest applied event, zero while none
// was applied.
func (a *Aggregator) LastEvent() time.Time {
	if ns := a.lastEvent.Load(); ns > 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// TrackedKeys returns the number of keys with state in memory now (at most
// Config.MaxKeys): what Overview reports as TrackedKeys, read without the
// aggregator's lock.
func (a *Aggregator) TrackedKeys() int { return int(a.tracked.Load()) }

// LockOrderHolds returns the holds the lock-order graph knows by lease now
// (at most maxOrderHolds): every acquisition's, until its end or expiry
// and 30 s after (at once while room is short). Only when every hold kept
// is still held does an acquisition under a hold it does not know make no
// edge.
func (a *Aggregator) LockOrderHolds() int { return int(a.order.holdCount.Load()) }

// DeadlockCycles returns the number of cycles of the wait-for graph found
// by the last scan (Tick).
func (a *Aggregator) DeadlockCycles() int { return a.waits.deadlockCycles() }

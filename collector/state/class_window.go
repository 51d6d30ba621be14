package state

import (
	"slices"
	"time"
)

// A class's figures over time, for /classes and the advice: the figures of
// the Prometheus series (acquisitions, contentions, failures by reason,
// wait and hold distributions, expirations) plus what only the advice
// needs (the TTLs holders set, how much of it holds without renewal used,
// the headroom renewals left), cut into the steps the hot keys use so that
// a class's window is the same as Hot keys' (1 m, 5 m, 1 h; see
// hotkeys.go): ten-second buckets for the last five minutes and minute
// buckets for the hour. A figure is written into its ten-second bucket
// only; a minute's six are folded into its minute bucket when the next
// minute's first figure comes (a figure that comes later for a minute
// already folded is written into both).
//
// Memory: a bucket is 576 bytes and a class keeps windowTens+windowMinutes
// of them, some 52 KB per class whatever its traffic (no bucket holds a
// string or grows): about 5 MB at the default MaxClasses of 100, plus the
// classes user rules name and "other" (TestClassWindowMemory).

const (
	windowTens    = 31 // ten-second buckets: the live one and the 30 of 5 m
	windowMinutes = 61 // minute buckets: the 60 of 1 h before the live one, and one spare
)

// Thresholds that the buckets count against, for the advice (advice.go).
const (
	nearTTLShare = 0.8              // a hold "near its TTL" ran past this share of it
	farTTLShare  = 0.1              // a hold "far below its TTL" stayed under this share of it
	longTTL      = 60 * time.Second // a TTL at least this long is "long": a crash costs a minute or more
	lateRenewal  = 0.5              // a renewal that left less than this share of its TTL is late
	riskRenewal  = 0.25             // LockLeaseAtRisk's share (alerts/lockscope.rules.yml)
)

// whist is a bucket's distribution over quantileBounds: counts, their sum,
// the largest observation and the smallest (so that the estimated
// quantiles of holds that all last 4.5 s read 4.5 s, not a point of the
// 2 s to 5 s bucket).
type whist struct {
	n   [22]uint32 // as qhist.n: one more than quantileBounds
	sum int64      // ns
	max int64      // ns
	lo  int64      // the smallest observation in ns, plus one; 0 while none
}

func (h *whist) merge(o *whist) {
	if o.lo == 0 {
		return
	}
	for i, c := range o.n {
		h.n[i] = uint32(min(uint64(h.n[i])+uint64(c), uint64(^uint32(0))))
	}
	h.sum += o.sum
	h.max = max(h.max, o.max)
	if h.lo == 0 || o.lo < h.lo {
		h.lo = o.lo
	}
}

// qindex is the bucket of v over quantileBounds: found once for both of
// an observation's buckets.
func qindex(v time.Duration) int {
	i, _ := slices.BinarySearch(quantileBounds, v) // the first bound >= v, as qhist.add's scan
	return i
}

// add counts v, in bucket i (qindex(v)).
func (h *whist) add(i int, v time.Duration) {
	if h.n[i] < ^uint32(0) {
		h.n[i]++
	}
	h.sum += int64(v)
	h.max = max(h.max, int64(v))
	if h.lo == 0 || int64(v)+1 < h.lo {
		h.lo = int64(v) + 1
	}
}

// ttlSet counts the TTLs holders set, up to ttlSlots distinct values (a TTL
// within a twentieth of one already counted counts as that one: a watched
// lock's TTL is read a few milliseconds after it was set).
type ttlSet struct {
	ms    [ttlSlots]int64
	n     [ttlSlots]int64
	other int64 // TTLs that found no slot
}

const ttlSlots = 4

// sameTTL reports whether TTLs a and b (ms) count as one.
func sameTTL(a, b int64) bool { return 20*max(a-b, b-a) <= max(a, b) }

func (s *ttlSet) add(ms, n int64) {
	for i := range s.ms {
		switch {
		case s.n[i] == 0:
			s.ms[i], s.n[i] = ms, n
			return
		case s.ms[i] == ms || sameTTL(s.ms[i], ms):
			s.n[i] += n
			return
		}
	}
	s.other += n
}

// classBucket is one class's figures of one step (a ten-second step or a
// minute). Durations are ns.
type classBucket struct {
	step int64

	acq, passive int64 // acquisitions; of them, seen by the passive watch (wait unknown)
	cont         int64 // contentions: acquisitions that waited, plus refused tries
	fail         [len(FailureReasons)]int64
	giveUpWait   int64 // total wait of the failed tries that gave up (timeout, held)
	expirations  int64
	noTTL        int64 // watched acquisitions without a TTL
	ttls         ttlSet
	wait, hold   whist

	// Holds that ended without a renewal, with a TTL: how many, how many
	// ran past nearTTLShare of it (an expiry does), and their distribution;
	// and those of a longTTL or more, and how many of these ran past
	// farTTLShare of it.
	bare, bareNear  int64
	bareHold        whist
	longBare, longO int64

	// Renewals that reported their headroom: how many, how many left less
	// than lateRenewal and riskRenewal of the TTL, and the least left (as a
	// share, and that renewal's headroom and TTL).
	renewals, renewLate, renewRisk int64
	minShare                       float64
	minHeadroom, minOf             int64
}

// classWindow is one class's ten-second and minute rings. Each bucket is
// tagged with its step; a bucket of an older step is reset when its slot is
// written.
type classWindow struct {
	tens       [windowTens]classBucket
	minutes    [windowMinutes]classBucket
	tensLatest int64 // the newest step written into tens
	open       int64 // the minute of tensLatest: every minute before it is folded into minutes
	born       int64 // collector time of the class's first event, unix ns

	at  int64        // the step of ten, when it is of the open minute (else -1)
	ten *classBucket // the bucket of at
}

func newClassWindow(now int64) *classWindow {
	w := &classWindow{born: now, at: -1, tensLatest: -1, open: -1}
	for i := range w.tens {
		w.tens[i].step = -1
	}
	for i := range w.minutes {
		w.minutes[i].step = -1
	}
	return w
}

// slot returns the bucket of step in ring b, reset if it held an older
// step; nil if step is older than the ring's newest step allows.
func slot(b []classBucket, newest, step int64) *classBucket {
	if step < 0 || step <= newest-int64(len(b)) {
		return nil
	}
	x := &b[step%int64(len(b))]
	if x.step != step {
		*x = classBucket{step: step}
	}
	return x
}

// pair returns the buckets a figure of the ten-second step step goes
// into: its ten-second bucket, and its minute's bucket if that minute is
// folded already (nil where there is none). Recording ranges over both.
func (w *classWindow) pair(step int64) [2]*classBucket {
	if step == w.at { // inlined: the common case
		return [2]*classBucket{w.ten, nil}
	}
	return w.pairSlow(step)
}

func (w *classWindow) pairSlow(step int64) [2]*classBucket {
	if m := step / hotMinuteLen; m > w.open {
		if w.open >= 0 {
			w.fold(w.open)
		}
		w.open = m
	}
	w.tensLatest = max(w.tensLatest, step)
	ten := slot(w.tens[:], w.tensLatest, step)
	if m := step / hotMinuteLen; m < w.open {
		w.at = -1 // a late figure: not cached
		return [2]*classBucket{ten, slot(w.minutes[:], w.open, m)}
	}
	w.at, w.ten = step, ten // non-nil: step is the newest or near it
	return [2]*classBucket{ten, nil}
}

// fold sums the ten-second buckets of minute m into its minute bucket.
func (w *classWindow) fold(m int64) {
	dst := slot(w.minutes[:], m, m)
	for st := m * hotMinuteLen; st < (m+1)*hotMinuteLen; st++ {
		if b := &w.tens[st%windowTens]; b.step == st {
			dst.merge(b)
		}
	}
}

// merge adds o's figures to b's.
func (b *classBucket) merge(o *classBucket) {
	b.acq += o.acq
	b.passive += o.passive
	b.cont += o.cont
	for i := range b.fail {
		b.fail[i] += o.fail[i]
	}
	b.giveUpWait += o.giveUpWait
	b.expirations += o.expirations
	b.noTTL += o.noTTL
	for i, ms := range o.ttls.ms {
		if o.ttls.n[i] > 0 {
			b.ttls.add(ms, o.ttls.n[i])
		}
	}
	b.ttls.other += o.ttls.other
	b.wait.merge(&o.wait)
	b.hold.merge(&o.hold)
	b.bareHold.merge(&o.bareHold)
	b.bare += o.bare
	b.bareNear += o.bareNear
	b.longBare += o.longBare
	b.longO += o.longO
	if o.renewals > 0 && (b.renewals == 0 || o.minShare < b.minShare) {
		b.minShare, b.minHeadroom, b.minOf = o.minShare, o.minHeadroom, o.minOf
	}
	b.renewals += o.renewals
	b.renewLate += o.renewLate
	b.renewRisk += o.renewRisk
}

// The recording calls, each made under Aggregator.mu at the current step.

func (w *classWindow) acquired(step int64, passive bool, ttl time.Duration) {
	for _, b := range w.pair(step) {
		if b == nil {
			continue
		}
		b.acq++
		switch {
		case ttl > 0:
			b.ttls.add(max(ttl.Milliseconds(), 1), 1)
		case passive:
			b.noTTL++
		}
		if passive {
			b.passive++
		}
	}
}

func (w *classWindow) contended(step int64) {
	for _, b := range w.pair(step) {
		if b != nil {
			b.cont++
		}
	}
}

func (w *classWindow) waited(step int64, d time.Duration) {
	i := qindex(d)
	for _, b := range w.pair(step) {
		if b != nil {
			b.wait.add(i, d)
		}
	}
}

func (w *classWindow) failed(step int64, reason int, wait time.Duration) {
	for _, b := range w.pair(step) {
		if b == nil {
			continue
		}
		b.fail[reason]++
		if reason == reasonTimeout || reason == reasonHeld {
			b.giveUpWait += int64(wait)
		}
	}
}

func (w *classWindow) held(step int64, d time.Duration) {
	i := qindex(d)
	for _, b := range w.pair(step) {
		if b != nil {
			b.hold.add(i, d)
		}
	}
}

func (w *classWindow) expired(step int64) {
	for _, b := range w.pair(step) {
		if b != nil {
			b.expirations++
		}
	}
}

// bareHold counts a hold of d that ended without a renewal under a TTL of ttl.
func (w *classWindow) bareHold(step int64, d, ttl time.Duration) {
	share := float64(d) / float64(ttl)
	i := qindex(d)
	for _, b := range w.pair(step) {
		if b == nil {
			continue
		}
		b.bare++
		if share > nearTTLShare {
			b.bareNear++
		}
		b.bareHold.add(i, d)
		if ttl >= longTTL {
			b.longBare++
			if share > farTTLShare {
				b.longO++
			}
		}
	}
}

// renewed counts a renewal that landed with headroom left of a TTL of.
func (w *classWindow) renewed(step int64, headroom, of time.Duration) {
	share := min(float64(headroom)/float64(of), 1)
	for _, b := range w.pair(step) {
		if b == nil {
			continue
		}
		if b.renewals == 0 || share < b.minShare {
			b.minShare, b.minHeadroom, b.minOf = share, int64(headroom), int64(of)
		}
		b.renewals++
		if share < lateRenewal {
			b.renewLate++
		}
		if share < riskRenewal {
			b.renewRisk++
		}
	}
}

// classSum is the sum of a window's buckets.
type classSum struct {
	acq, passive, cont int64
	fail               [len(FailureReasons)]int64
	giveUpWait         int64
	expirations, noTTL int64
	ttls               []TTLCount // the TTLs set, in the order first seen (sameTTL ones merged)
	ttlOther           int64
	wait, hold, bare   sumHist
	bareN, bareNear    int64
	longBare, longO    int64

	renewals, renewLate, renewRisk int64
	minShare                       float64
	minHeadroom, minOf             int64
}

// sumHist is a merged whist.
type sumHist struct {
	q   qhist
	sum int64
	n   int64
	lo  int64 // as whist.lo
}

func (s *sumHist) add(h *whist) {
	if h.lo == 0 {
		return // no observation
	}
	for i, c := range h.n {
		s.q.n[i] += int64(c)
		s.n += int64(c)
	}
	s.sum += h.sum
	s.q.max = max(s.q.max, h.max)
	if h.lo > 0 && (s.lo == 0 || h.lo < s.lo) {
		s.lo = h.lo
	}
}

// summary returns the merged distribution's figures, the quantiles never
// below the smallest observation nor above the largest.
func (s *sumHist) summary() Summary {
	if s.n == 0 {
		return Summary{}
	}
	lo := time.Duration(s.lo - 1)
	return Summary{Count: s.n, Avg: time.Duration(s.sum / s.n), P50: max(s.q.quantile(0.5), lo), P99: max(s.q.quantile(0.99), lo),
		Max: time.Duration(s.q.max)}
}

func (s *classSum) add(b *classBucket) {
	s.acq += b.acq
	s.passive += b.passive
	s.cont += b.cont
	for i := range s.fail {
		s.fail[i] += b.fail[i]
	}
	s.giveUpWait += b.giveUpWait
	s.expirations += b.expirations
	s.noTTL += b.noTTL
	for i, ms := range b.ttls.ms {
		if b.ttls.n[i] > 0 {
			s.addTTL(ms, b.ttls.n[i])
		}
	}
	s.ttlOther += b.ttls.other
	s.wait.add(&b.wait)
	s.hold.add(&b.hold)
	s.bare.add(&b.bareHold)
	s.bareN += b.bare
	s.bareNear += b.bareNear
	s.longBare += b.longBare
	s.longO += b.longO
	if b.renewals > 0 && (s.renewals == 0 || b.minShare < s.minShare) {
		s.minShare, s.minHeadroom, s.minOf = b.minShare, b.minHeadroom, b.minOf
	}
	s.renewals += b.renewals
	s.renewLate += b.renewLate
	s.renewRisk += b.renewRisk
}

// addTTL counts n acquisitions with a TTL of ms. There are at most
// ttlSlots a bucket, so at most ttlSlots times the buckets of a window.
func (s *classSum) addTTL(ms, n int64) {
	for i := range s.ttls {
		if sameTTL(s.ttls[i].TTL.Milliseconds(), ms) {
			s.ttls[i].Count += n
			return
		}
	}
	s.ttls = append(s.ttls, TTLCount{TTL: time.Duration(ms) * time.Millisecond, Count: n})
}

// windowSteps returns which ring a window reads and the steps it covers, at
// the ten-second step cur: 1 m and 5 m are the live ten-second bucket and
// the 6 or 30 before it, 1 h the live minute and the 60 before it (as
// hotKeys.windowSources).
func windowSteps(window time.Duration, cur int64) (minutes bool, from, to int64) {
	if window > 5*time.Minute {
		m := cur / hotMinuteLen
		return true, m - 60, m
	}
	return false, cur - int64(window/seriesStep), cur
}

// sum merges the buckets of window at the ten-second step cur; start is
// the collector time the figures begin at: the start of the window's first
// step, or the class's first event if later. A minute not folded yet (the
// open one: the newest written) is read from its ten-second buckets.
func (w *classWindow) sum(window time.Duration, cur int64) (s classSum, start int64) {
	minutes, from, to := windowSteps(window, cur)
	ten := func(st int64) {
		if b := &w.tens[st%windowTens]; st >= 0 && b.step == st {
			s.add(b)
		}
	}
	for st := max(from, 0); st <= to; st++ {
		switch {
		case !minutes:
			ten(st)
		case st >= w.open:
			for t := st * hotMinuteLen; t < (st+1)*hotMinuteLen; t++ {
				ten(t)
			}
		default:
			if b := &w.minutes[st%windowMinutes]; b.step == st {
				s.add(b)
			}
		}
	}
	step := int64(seriesStep)
	if minutes {
		step *= hotMinuteLen
	}
	return s, max(from*step, w.born)
}

// series returns the figures of the ten-second steps of the last five
// minutes, ending with cur, oldest first.
func (w *classWindow) series(cur int64) []ClassStep {
	out := make([]ClassStep, windowTens)
	for j := range out {
		st := cur - windowTens + 1 + int64(j)
		out[j].At = time.Unix(0, st*int64(seriesStep))
		if st < 0 || w.tens[st%windowTens].step != st {
			continue
		}
		var s classSum
		s.add(&w.tens[st%windowTens])
		f := &out[j]
		f.Acquisitions, f.Contentions, f.Expirations = s.acq, s.cont, s.expirations
		for _, n := range s.fail {
			f.Failures += n
		}
		f.WaitP99, f.HoldP99 = s.wait.summary().P99, s.hold.summary().P99
	}
	return out
}

package state

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Hot keys are ranked with space-saving sketches (Metwally et al.), one per
// ranking per time bucket, so memory depends on the sketch capacity and the
// number of buckets, never on how many distinct keys stream through.
//
// Events land in the live bucket of the current 10 s step. When the step
// changes the live bucket is frozen (its entries copied into an immutable
// slice) and, at each minute boundary, the minute's six frozen buckets are
// merged into one minute bucket. A window is the live bucket plus frozen
// buckets: 1 m = live + 6 ten-second buckets, 5 m = live + 30, 1 h = live +
// the current minute's ten-second buckets + 60 minute buckets. Windows are
// thus step-aligned and cover between W and W+10 s.
//
// Merging follows the mergeable-summaries rule: a sketch that is full has a
// floor (its smallest count) bounding the count of any key it does not
// hold, so a key's merged estimate is the sum over buckets of its count
// where present and the floor where absent; its error bound sums the same
// way. Estimates only over-count: the true figure lies in
// [estimate-Error, estimate].
const (
	hotCapacity   = 1024 // entries per sketch
	hotTenSlots   = 32   // frozen 10 s buckets kept (30 for 5 m, plus slack)
	hotMinuteLen  = 6    // 10 s steps per minute bucket
	hotMinuteSlot = 62   // frozen minute buckets kept (60 for 1 h, plus slack)
)

// hotEntry is one tracked key of a sketch. count is the ranked figure
// (contentions, or wait in ns) and err its over-estimate bound; cont, wait,
// acq and hold (ns, of holds that ended; the contention sketch only) are
// the key's figures counted while it was tracked (lower bounds).
type hotEntry struct {
	key, class            string
	count, err            int64
	cont, wait, acq, hold int64
}

// liveSketch is a space-saving sketch being written: a fixed pool of
// entries, a min-heap on count over them, and an index from key to entry.
//
// Every acquisition adds its wait to the wait sketch, and once the sketch is
// full nearly every one of them replaces its smallest entry: this runs for
// most events and is kept cheap (it was a fifth of ingest's CPU with a Go
// map and a heap of entry numbers, BENCHMARKS.md, issue 16). The index is
// an open-addressing table on the key's hash as the aggregator already
// computed it, so a lookup hashes nothing and a replacement finds the old
// key's slot without reading that key's bytes, and deletes shift entries
// back instead of leaving tombstones (a hashIndex, as shard.idx). The heap
// nodes carry their count, so sifting reads only the heap.
type liveSketch struct {
	ents []hotEntry
	hash []uint32  // entry -> its key's hash
	pos  []int32   // entry -> heap position
	heap []hotNode // smallest count first
	idx  hashIndex // 2*hotCapacity slots: hash<<32 | entry+1
}

// hotNode is a heap node: an entry and its count (== ents[ent].count).
type hotNode struct {
	count int64
	ent   int32
}

func newLiveSketch() *liveSketch {
	return &liveSketch{
		ents: make([]hotEntry, 0, hotCapacity),
		hash: make([]uint32, 0, hotCapacity),
		pos:  make([]int32, 0, hotCapacity),
		heap: make([]hotNode, 0, hotCapacity),
		idx:  make(hashIndex, 2*hotCapacity),
	}
}

// add counts w on key's ranked figure plus the side figures; hash is the
// key's hash (any well-mixed 32 bits, the same for every add of the key).
// With w == 0 a key is added only while the sketch has room, so keys that
// never contend cannot push out keys that do.
func (s *liveSketch) add(key string, hash uint32, class string, w, cont, wait, acq int64) {
	if i := s.find(key, hash); i >= 0 {
		e := &s.ents[i]
		e.count += w
		e.cont += cont
		e.wait += wait
		e.acq += acq
		if w > 0 {
			p := s.pos[i]
			s.heap[p].count = e.count
			s.down(int(p))
		}
		return
	}
	if len(s.ents) < hotCapacity {
		i := int32(len(s.ents))
		s.ents = append(s.ents, hotEntry{key: key, class: class, count: w, cont: cont, wait: wait, acq: acq})
		s.hash = append(s.hash, hash)
		s.pos = append(s.pos, int32(len(s.heap)))
		s.heap = append(s.heap, hotNode{count: w, ent: i})
		s.idx.insert(uint64(hash)<<32 | uint64(i+1))
		s.up(len(s.heap) - 1)
		return
	}
	if w == 0 {
		return
	}
	i := s.heap[0].ent
	s.idx.remove(uint64(s.hash[i])<<32 | uint64(i+1))
	e := &s.ents[i]
	floor := e.count
	*e = hotEntry{key: key, class: class, count: floor + w, err: floor, cont: cont, wait: wait, acq: acq}
	s.hash[i] = hash
	s.idx.insert(uint64(hash)<<32 | uint64(i+1))
	s.heap[0].count = e.count
	s.down(0)
}

// addHold adds a hold of d ns to key's side figure, adding key only while
// the sketch has room (as add with w == 0).
func (s *liveSketch) addHold(key string, hash uint32, class string, d int64) {
	if i := s.find(key, hash); i >= 0 {
		s.ents[i].hold += d
		return
	}
	if len(s.ents) < hotCapacity {
		s.add(key, hash, class, 0, 0, 0, 0)
		s.ents[len(s.ents)-1].hold = d
	}
}

// find returns the entry of key, or -1.
func (s *liveSketch) find(key string, hash uint32) int32 {
	mask := uint32(len(s.idx) - 1)
	for j := hash & mask; ; j = (j + 1) & mask {
		e := s.idx[j]
		if e == 0 {
			return -1
		}
		if uint32(e>>32) == hash {
			if i := int32(uint32(e)) - 1; s.ents[i].key == key {
				return i
			}
		}
	}
}

func (s *liveSketch) less(a, b int) bool { return s.heap[a].count < s.heap[b].count }

func (s *liveSketch) swap(a, b int) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.pos[s.heap[a].ent] = int32(a)
	s.pos[s.heap[b].ent] = int32(b)
}

func (s *liveSketch) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !s.less(j, p) {
			return
		}
		s.swap(j, p)
		j = p
	}
}

// down restores the heap after the count at j grew. It works bottom-up: the
// smaller child moves up into the hole, one comparison a level, down to a
// leaf, and the grown node then climbs back to its place. A replaced minimum
// takes the floor plus its weight, above most counts, so its place is near
// the leaves: the climb is short, and each level costs one comparison
// instead of two.
func (s *liveSketch) down(j int) {
	n := len(s.heap)
	x := s.heap[j]
	top := j
	for {
		l := 2*j + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s.heap[r].count < s.heap[l].count {
			m = r
		}
		s.heap[j] = s.heap[m]
		s.pos[s.heap[j].ent] = int32(j)
		j = m
	}
	for j > top {
		p := (j - 1) / 2
		if s.heap[p].count <= x.count {
			break
		}
		s.heap[j] = s.heap[p]
		s.pos[s.heap[j].ent] = int32(j)
		j = p
	}
	s.heap[j] = x
	s.pos[x.ent] = int32(j)
}

// freeze returns an immutable copy of the sketch.
func (s *liveSketch) freeze() frozenSketch {
	f := frozenSketch{ents: slices.Clone(s.ents)}
	if len(s.ents) == hotCapacity {
		f.floor = s.heap[0].count
	}
	return f
}

func (s *liveSketch) reset() {
	clear(s.idx)
	s.ents = s.ents[:0]
	s.hash = s.hash[:0]
	s.pos = s.pos[:0]
	s.heap = s.heap[:0]
}

// frozenSketch is a closed sketch. floor bounds the ranked figure of any key
// not in ents. ents is never modified once built (readers share it).
type frozenSketch struct {
	ents  []hotEntry
	floor int64
}

// mergeSketches merges sketches into one of at most capacity entries.
func mergeSketches(srcs []frozenSketch, capacity int) frozenSketch {
	var floorSum int64
	n := 0
	for _, s := range srcs {
		floorSum += s.floor
		n += len(s.ents)
	}
	if len(srcs) == 1 && len(srcs[0].ents) <= capacity {
		return srcs[0]
	}
	idx := make(map[string]int, n)
	acc := make([]hotEntry, 0, n)
	for _, s := range srcs {
		for _, e := range s.ents {
			i, ok := idx[e.key]
			if !ok {
				i = len(acc)
				idx[e.key] = i
				acc = append(acc, hotEntry{key: e.key, class: e.class})
			}
			a := &acc[i]
			// Count the excess over this bucket's floor; every bucket's
			// floor is added back below, present or not.
			a.count += e.count - s.floor
			a.err += e.err - s.floor
			a.cont += e.cont
			a.wait += e.wait
			a.acq += e.acq
			a.hold += e.hold
		}
	}
	for i := range acc {
		acc[i].count += floorSum
		acc[i].err += floorSum
	}
	sortHot(acc)
	out := frozenSketch{floor: floorSum}
	if len(acc) > capacity {
		out.floor = max(floorSum, acc[capacity].count)
		acc = acc[:capacity]
	}
	// A fresh slice of the exact size: the merge buffer is several
	// sketches large and minute buckets are kept for an hour.
	out.ents = slices.Clone(acc)
	return out
}

// sortHot orders entries by ranked figure, highest first, then by key.
func sortHot(es []hotEntry) {
	slices.SortFunc(es, func(a, b hotEntry) int {
		if c := cmp.Compare(b.count, a.count); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
}

// hotTotals are exact window totals, kept beside the sketches.
type hotTotals struct{ cont, wait, acq int64 }

func (t *hotTotals) add(o hotTotals) { t.cont += o.cont; t.wait += o.wait; t.acq += o.acq }

// hotBucket is a frozen bucket: step is the 10 s step, or the minute, it
// covers.
type hotBucket struct {
	step    int64
	valid   bool
	cont    frozenSketch
	wait    frozenSketch
	passive frozenSketch
	totals  hotTotals
}

// hotKeys holds the live bucket and the frozen ones. It is guarded by the
// aggregator's lock; frozen sketches are immutable and read outside it.
type hotKeys struct {
	step     int64 // the live bucket's step
	liveCont *liveSketch
	liveWait *liveSketch
	// livePassive ranks watched keys (passive acquisitions) by their
	// acquisitions: their contention is unknown (a caller that finds such a
	// lock held writes nothing to Redis), so the other two sketches cannot
	// rank them. Only passive acquisitions reach it.
	livePassive *liveSketch
	liveTotals  hotTotals
	tens        [hotTenSlots]hotBucket
	minutes     [hotMinuteSlot]hotBucket

	cacheMu sync.Mutex
	cache   map[hotCacheKey]hotCached
}

type hotCacheKey struct {
	window time.Duration
	by     Ranking
}

// hotCached is the merge of a window's frozen buckets, valid while the
// live bucket is at step.
type hotCached struct {
	step   int64
	merged frozenSketch
}

func newHotKeys(now int64) *hotKeys {
	return &hotKeys{
		step:        stepOf(now),
		liveCont:    newLiveSketch(),
		liveWait:    newLiveSketch(),
		livePassive: newLiveSketch(),
		cache:       make(map[hotCacheKey]hotCached),
	}
}

// record counts one acquired or failed event.
// hash is the key's (any 32 well-mixed bits, the same for every event of
// the key).
func (h *hotKeys) record(key string, hash uint32, class string, contended bool, wait time.Duration, acquired bool) {
	h.recordWeights(key, hash, class, contended, wait, acquired)
}

// recordPassive counts one passive acquisition: in the sketches of known
// contention as any (a Redisson waiter seen taking the lock is one), and in
// the passive one by its acquisition.
func (h *hotKeys) recordPassive(key string, hash uint32, class string, contended bool, wait time.Duration) {
	h.recordWeights(key, hash, class, contended, wait, true)
	var c int64
	if contended {
		c = 1
	}
	h.livePassive.add(key, hash, class, 1, c, int64(wait), 1)
}

func (h *hotKeys) recordWeights(key string, hash uint32, class string, contended bool, wait time.Duration, acquired bool) {
	var c, a int64
	if contended {
		c = 1
	}
	if acquired {
		a = 1
	}
	w := int64(wait)
	h.liveCont.add(key, hash, class, c, c, w, a)
	h.liveWait.add(key, hash, class, w, c, w, a)
	h.liveTotals.add(hotTotals{c, w, a})
}

// recordHold counts a hold of d that ended, for the keys the contention
// sketch tracks (the class view's busiest key: class_stats.go).
func (h *hotKeys) recordHold(key string, hash uint32, class string, d time.Duration) {
	h.liveCont.addHold(key, hash, class, int64(d))
}

// advance moves the live bucket to the step of now, freezing the old one.
func (h *hotKeys) advance(now int64) {
	cur := stepOf(now)
	if cur <= h.step {
		return
	}
	old := h.step
	h.tens[old%hotTenSlots] = hotBucket{step: old, valid: true,
		cont: h.liveCont.freeze(), wait: h.liveWait.freeze(), passive: h.livePassive.freeze(), totals: h.liveTotals}
	h.liveCont.reset()
	h.liveWait.reset()
	h.livePassive.reset()
	h.liveTotals = hotTotals{}
	if m := old / hotMinuteLen; cur/hotMinuteLen > m {
		var cont, wait, passive []frozenSketch
		var totals hotTotals
		for s := m * hotMinuteLen; s <= old; s++ {
			if b := h.tens[s%hotTenSlots]; b.valid && b.step == s {
				cont = append(cont, b.cont)
				wait = append(wait, b.wait)
				if len(b.passive.ents) > 0 {
					passive = append(passive, b.passive)
				}
				totals.add(b.totals)
			}
		}
		h.minutes[m%hotMinuteSlot] = hotBucket{step: m, valid: true,
			cont: mergeSketches(cont, hotCapacity), wait: mergeSketches(wait, hotCapacity),
			passive: mergeSketches(passive, hotCapacity), totals: totals}
	}
	h.step = cur
}

// windowSources returns, under the aggregator's lock, the frozen sketches
// of window for ranking by, a frozen copy of the live sketch, the window's
// exact totals and the live step.
func (h *hotKeys) windowSources(window time.Duration, by Ranking) (frozen []frozenSketch, live frozenSketch, totals hotTotals, step int64) {
	pick := func(b *hotBucket) frozenSketch {
		switch by {
		case ByWait:
			return b.wait
		case byPassive:
			return b.passive
		}
		return b.cont
	}
	cur := h.step
	tenFrom := cur - int64(window/seriesStep)
	if window > 5*time.Minute {
		tenFrom = cur / hotMinuteLen * hotMinuteLen
		m := cur / hotMinuteLen
		for x := m - 60; x < m; x++ {
			if b := &h.minutes[x%hotMinuteSlot]; b.valid && b.step == x {
				frozen = append(frozen, pick(b))
				totals.add(b.totals)
			}
		}
	}
	for s := tenFrom; s < cur; s++ {
		if s < 0 {
			continue
		}
		if b := &h.tens[s%hotTenSlots]; b.valid && b.step == s {
			frozen = append(frozen, pick(b))
			totals.add(b.totals)
		}
	}
	switch by {
	case ByWait:
		live = h.liveWait.freeze()
	case byPassive:
		live = h.livePassive.freeze()
	default:
		live = h.liveCont.freeze()
	}
	totals.add(h.liveTotals)
	return frozen, live, totals, cur
}

// normalizeWindow maps any window onto one of Windows (the smallest that
// covers it).
func normalizeWindow(w time.Duration) time.Duration {
	for _, x := range Windows {
		if w <= x {
			return x
		}
	}
	return Windows[len(Windows)-1]
}

// HotTop returns the top n keys of window by ranking, and the window's exact
// total of the ranked figure.
func (a *Aggregator) HotTop(window time.Duration, by Ranking, n int) ([]HotKey, int64) {
	window = normalizeWindow(window)
	if by != ByWait && by != byPassive {
		by = ByContentions
	}
	a.mu.Lock()
	h := a.hot // BeginReplay replaces it, under a.mu
	a.advanceLocked(a.nowNS())
	frozen, live, totals, step := h.windowSources(window, by)
	a.mu.Unlock()

	key := hotCacheKey{window, by}
	h.cacheMu.Lock()
	c, ok := h.cache[key]
	h.cacheMu.Unlock()
	if !ok || c.step != step {
		c = hotCached{step: step, merged: mergeSketches(frozen, hotCapacity)}
		h.cacheMu.Lock()
		h.cache[key] = c
		h.cacheMu.Unlock()
	}
	merged := mergeSketches([]frozenSketch{c.merged, live}, hotCapacity)

	out := make([]HotKey, 0, min(n, len(merged.ents)))
	for _, e := range merged.ents {
		if len(out) == n {
			break
		}
		if e.count == 0 {
			break // sorted: the rest are zero as well
		}
		hk := HotKey{Key: e.key, Class: e.class, Acquisitions: e.acq, Error: e.err, Hold: time.Duration(e.hold)}
		if by == byPassive {
			hk.Acquisitions, hk.Contentions, hk.Wait, hk.ContentionUnknown = e.count, e.cont, time.Duration(e.wait), true
		} else if by == ByWait {
			hk.Wait, hk.Contentions = time.Duration(e.count), e.cont
		} else {
			hk.Contentions, hk.Wait = e.count, time.Duration(e.wait)
		}
		out = append(out, hk)
	}
	total := totals.cont
	if by == ByWait {
		total = totals.wait
	}
	return out, total
}

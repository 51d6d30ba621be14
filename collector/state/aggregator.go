package state

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockscope/lockscope/event"
)

// Aggregator turns lock events into per-key state, hot keys, waiters and
// the figures it counts through Config.Metrics, and answers the queries the
// dashboard and the Prometheus export read.
//
// # What the figures mean
//
//   - Contention: an acquisition that needed more than one attempt, or a
//     failed obtain with reason "held" (a single try refused). Waiting for a
//     few microseconds of Redis round trip is not contention; a retry is.
//   - Waiters: live, from waiting events (the library reports one when an
//     obtain's first attempt finds the lock held); a wait ends with the
//     same lease's acquired or failed event, or at its deadline (see
//     waiters.go, which also keeps the wait-for graph and its cycles).
//   - Stuck: held longer than StuckAfter (or the class's override). The
//     wire carries no maximum hold, so the threshold is the maximum hold
//     operators expect; a hold renewing past it is stuck.
//   - Expired while held: a hold ends once, by the first of: its release,
//     a forced release, a lost event (an expiration if it came after the
//     TTL), an expired event, a keyspace notification (KeyExpired), or Tick
//     finding the TTL lapsed more than ExpiryGrace ago. An acquisition by
//     another lease after the old hold's TTL parks the old hold until its
//     late end event (if it came from before the TTL) or the grace decides.
//     Each process's emitter flushes on its own schedule, so an older
//     hold's acquisition can arrive after a newer one's: an acquisition by
//     another lease timed before the known hold began is counted but does
//     not take the key, and its end events end only that older hold. If
//     its TTL ran out before the known hold began it is parked as above;
//     if not, it ended before the known hold began and never counts as
//     expired. A key keeps up to maxPending parked holds, each decided on
//     its own.
//     A renewal after a declared expiry revives the hold; the counter keeps
//     its count, and the revived hold's end, however it comes, counts no
//     second expiration nor hold time: it is one hold.
//   - Handoff: an acquisition by a different owner than the key's previous
//     owner (remembered while the key is tracked).
//   - Hold time is observed once per hold, when it ends; a not_owner
//     release (the hold had already ended) adds nothing.
//
// # Locking
//
// Writers (Apply, Tick, KeyExpired) serialise on mu and, inside it, take the
// lock of the one key shard they touch. Readers never take mu and a shard
// lock together, and never hold either for long: a query copies what it
// needs (one shard at a time for key scans, a bounded slice of rings for the
// overview) and sorts, merges and formats outside the locks. The longest a
// reader holds a lock ingestion needs is one pass over one shard (at most
// MaxKeys/64 keys, about 3 000 by default, read from the shard's slabs in
// memory order: some 50 µs, twice that with a search) or one copy of
// the live hot-key sketch (1 024 entries). Apply releases mu every
// applyChunk events so a reader waits at most that long.
//
// # Memory
//
// A tracked key costs about 400 bytes: its state in a slab (248 bytes), its
// index entry, key and lease, and its recent events encoded at some 30 bytes
// each (see state_ring.go). Its distributions and series (keyStats, 328
// bytes) exist only once its ring has overflowed; until then they are
// replayed from the ring. With the default MaxKeys of 200 000 that is about
// 80 MB, and a stream of 10 M distinct keys peaks at about 230 MB of RSS
// with the Go runtime's default GOGC (BenchmarkDistinctKeys10M;
// BENCHMARKS.md).
//
// # Clocks
//
// Windows, series and rates are cut by the collector's clock (Config.Now)
// when events are applied. Holds are timed by the event clock: an event's
// TS, clamped to the collector's clock (no event is from the future). Expiry
// and stuck detection compare holds against the newest applied event time
// advanced by the wall time since it was applied, so a collector replaying
// a backlog does not declare holds expired that were renewed in events it
// has not read yet.
type Aggregator struct {
	cfg   Config
	rules []classRule
	met   Metrics // where the figures are counted (Config.Metrics)
	tot   Totals  // met's state-wide figures
	keys  *keyTable
	hot   *hotKeys

	tracked   atomic.Int64
	malformed atomic.Int64
	lag       atomic.Int64
	pending   atomic.Int64
	gap       atomic.Int64

	healthMu sync.Mutex
	health   error

	mu          sync.Mutex
	classes     map[string]*classState
	classNames  atomic.Pointer[[]string] // sorted; replaced when a class is added
	derived     int                      // classes made by the default derivation
	buf         []byte
	prefixes    [8]prefixClass // the newest key prefixes with their class (see classOfLocked)
	prefixNext  int            // the entry of prefixes to replace next
	steps       stepRing
	cur         *stepStats // the current step's figures (set by advanceLocked)
	exps        expRing
	forced      forcedRing
	tab         internTab
	scratch     []byte                   // pushLocked's encoding buffer
	rec         *record                  // the record of the event being applied (see observe)
	recKey      *keyState                // whose record rec is
	recBufs     [2]record                // rec points here: an event's, and an expiry's within it
	pendingKeys []*keyState              // keys with superseded holds awaiting their verdict
	parked      map[string]parkedRelease // passive releases awaiting a forced release that explains them
	expiries    expiryHeap               // holds by expiry (see expiryHeap)
	lastScan    int64                    // collector time of Tick's last stuck/oldest pass
	evMax       int64                    // newest applied event time
	evAt        int64                    // collector time when evMax was applied
	eventsTotal int64
	dropped     int64
	replaying   int      // replays between BeginReplay and EndReplay
	replayAt    int64    // the replay's clock: the newest replayed event time
	muted       bool     // counters go nowhere (see Replay)
	waits       waits    // live waiters (waiters.go)
	hashes      []uint64 // the hashes of the chunk being applied (warmLocked)
	warm        uint64   // the sum of warmLocked's loads: used, so they stay
}

const (
	applyChunk   = 512  // events applied per hold of mu
	maxInterned  = 4096 // distinct owner/reason strings shared between records
	maxStoredLen = 512  // owner, lease, reason, ... bytes kept per record
	ringLen      = 256  // recent expirations and forced releases kept
)

// classState is one lock class: its metric children and mirrored gauges.
// Guarded by Aggregator.mu except name and stuckAfter, which never change.
type classState struct {
	name       string
	stuckAfter time.Duration
	m          ClassMetrics // counted, or nopClass while muted
	counted    ClassMetrics // Metrics.Class(name)
	held       int
	stuck      int   // set by Tick
	noExpiry   int   // held without a TTL, set by Tick
	oldest     int64 // since of the oldest hold, unix ns (refreshed by Tick)
}

// New returns an Aggregator configured by cfg.
func New(cfg Config) *Aggregator {
	cfg = cfg.withDefaults()
	a := &Aggregator{
		cfg:     cfg,
		rules:   compileRules(cfg.Classes),
		keys:    newKeyTable(cfg.MaxKeys),
		classes: make(map[string]*classState),
		tab:     internTab{ids: make(map[string]uint32)},
	}
	a.waits.init()
	a.met = cfg.Metrics
	if a.met == nil {
		a.met = nopMetrics{}
	}
	a.tot = a.met.Totals()
	now := a.nowNS()
	a.hot = newHotKeys(now)
	a.cur = a.steps.at(stepOf(now))
	a.classNames.Store(&[]string{})
	return a
}

func (a *Aggregator) nowNS() int64 { return a.cfg.Now().UnixNano() }

// eventClock is the event-time "now" used for expiry and stuck detection.
func (a *Aggregator) eventClock(now int64) int64 {
	if a.evAt == 0 {
		return now
	}
	return min(now, a.evMax+(now-a.evAt))
}

// advanceLocked moves the step ring and hot-key buckets to now.
func (a *Aggregator) advanceLocked(now int64) {
	a.hot.advance(now)
	if s := stepOf(now); s != a.cur.step && s > a.cur.step {
		a.cur = a.steps.at(s)
	}
}

// Apply aggregates decoded events. Strings in evs may share memory with the
// stream entry; Apply clones what it keeps.
func (a *Aggregator) Apply(evs []event.Event) {
	for len(evs) > 0 {
		chunk := evs[:min(len(evs), applyChunk)]
		evs = evs[len(chunk):]
		now := a.nowNS()
		a.mu.Lock()
		if a.replaying == 0 {
			a.advanceLocked(now)
		}
		hs := a.warmLocked(chunk)
		for i := range chunk {
			e := &chunk[i]
			if len(a.parked) > 0 {
				a.unparkForLocked(e, now)
			}
			if e.Type == event.Released && e.Passive && a.parkReleaseLocked(e, now) {
				continue
			}
			a.applyHashedLocked(e, hs[i], now)
		}
		last := a.evMax
		a.mu.Unlock()
		if last > 0 {
			a.tot.LastEvent.Set(float64(last) / 1e9)
		}
	}
}

// Malformed counts n stream entries that could not be decoded.
func (a *Aggregator) Malformed(n int) {
	if n <= 0 {
		return
	}
	a.malformed.Add(int64(n))
	a.tot.Malformed.Add(float64(n))
}

// SetHealth records the ingest state reported by Health.
func (a *Aggregator) SetHealth(err error) {
	a.healthMu.Lock()
	a.health = err
	a.healthMu.Unlock()
}

// Health reports the ingest state set by SetHealth: nil while the consumer
// group is reading.
func (a *Aggregator) Health() error {
	a.healthMu.Lock()
	defer a.healthMu.Unlock()
	return a.health
}

// SetStreamStats records the consumer group's lag (entries not yet
// delivered) and pending entries (delivered, not acknowledged).
func (a *Aggregator) SetStreamStats(lag, pending int64) {
	a.lag.Store(lag)
	a.pending.Store(pending)
	a.tot.Lag.Set(float64(lag))
	a.tot.Pending.Set(float64(pending))
}

// StreamGap counts entries trimmed from the stream before they were read.
func (a *Aggregator) StreamGap(missing int64) {
	if missing <= 0 {
		return
	}
	a.gap.Add(missing)
	a.tot.StreamGap.Add(float64(missing))
}

// classOfLocked returns the class of key, creating it if needed.
func (a *Aggregator) classOfLocked(key string) *classState {
	if c, ok := ruleClass(key, a.rules); ok {
		a.buf = append(a.buf[:0], c...)
		return a.namedClassLocked(a.buf, true)
	}
	// A stream of distinct keys (order ids, job ids) brings a new key with
	// each acquisition, and deriving its class was a twentieth of applying
	// such a stream. Its keys differ in a last segment that derives to '*'
	// whole, after a prefix they share; the derivation goes segment by
	// segment, so keys with the same prefix before such a segment have the
	// same class: the last few such prefixes are remembered with it.
	i := lastSegment(key)
	if i == 0 || !wholeIdentifier(key[i:]) {
		return a.derivedClassLocked(key)
	}
	prefix := key[:i]
	for j := range a.prefixes {
		if m := &a.prefixes[j]; m.class != nil && m.prefix == prefix {
			return m.class
		}
	}
	c := a.derivedClassLocked(key)
	a.prefixes[a.prefixNext] = prefixClass{prefix: strings.Clone(prefix), class: c}
	a.prefixNext = (a.prefixNext + 1) % len(a.prefixes)
	return c
}

// derivedClassLocked returns the class of key by the default derivation.
func (a *Aggregator) derivedClassLocked(key string) *classState {
	a.buf = appendDefaultClass(a.buf[:0], key)
	return a.namedClassLocked(a.buf, false)
}

// prefixClass is the class of the keys that are prefix followed by a
// segment that derives to '*' whole (see classOfLocked).
type prefixClass struct {
	prefix string // up to the key's last ':' or '/', included
	class  *classState
}

// namedClassLocked returns the class named name, creating it if needed;
// user reports whether a rule named it, else it comes from the default
// derivation and counts against Config.MaxClasses.
func (a *Aggregator) namedClassLocked(name []byte, user bool) *classState {
	if c, ok := a.classes[string(name)]; ok {
		return c
	}
	if string(name) == OtherClass || (!user && a.derived >= a.cfg.MaxClasses) {
		return a.classLocked(OtherClass)
	}
	if !user {
		a.derived++
	}
	return a.classLocked(string(name))
}

func (a *Aggregator) classLocked(name string) *classState {
	if c, ok := a.classes[name]; ok {
		return c
	}
	c := &classState{name: name, stuckAfter: a.cfg.StuckAfter, counted: a.met.Class(name)}
	c.m = c.metricsFor(a.muted)
	if d, ok := a.cfg.StuckAfterByClass[name]; ok && d > 0 {
		c.stuckAfter = d
	}
	a.classes[name] = c
	names := append(slices.Clone(*a.classNames.Load()), name)
	slices.Sort(names)
	a.classNames.Store(&names)
	return c
}

// internLocked returns a long-lived copy of s (at most maxStoredLen
// bytes), shared between records and with an intern id while the table
// has room.
func (a *Aggregator) internLocked(s string) ref {
	if s == "" {
		return ref{}
	}
	if len(s) > maxStoredLen {
		s = s[:maxStoredLen]
	}
	if id, ok := a.tab.ids[s]; ok {
		return ref{s: a.tab.get(id), id: id}
	}
	v := strings.Clone(s)
	_, id := a.tab.add(v)
	return ref{s: v, id: id}
}

// leaseOf returns a long-lived copy of lease, shared with k's hold when equal.
func leaseOf(k *keyState, lease string) string {
	switch {
	case lease == "":
		return ""
	case lease == k.lease:
		return k.lease
	}
	if p := k.prevOf(lease, ""); p != nil && p.lease == lease {
		return p.lease
	}
	if len(lease) > maxStoredLen {
		lease = lease[:maxStoredLen]
	}
	return strings.Clone(lease)
}

// keyLocked returns the state of key in sh, creating it (and evicting the
// least recently active idle key if the shard is full).
func (a *Aggregator) keyLocked(sh *shard, h uint64, key string) *keyState {
	if k := sh.get(h, key); k != nil {
		return k
	}
	evicted := false
	if sh.count >= sh.cap {
		v := sh.idle.back()
		if v == nil {
			// Every key of the shard is held (holds without TTL that never
			// end, or a flood of them): memory wins, the least recently
			// active hold stops being tracked.
			v = sh.held.back()
		}
		if v != nil {
			a.evictLocked(sh, v)
			evicted = true
		}
	}
	if !evicted {
		// One more key tracked; else it takes the evicted key's place, and
		// the count stays (two atomic additions fewer per key of a stream
		// of distinct keys).
		a.tracked.Add(1)
	}
	k := sh.alloc()
	k.key = strings.Clone(key)
	k.class = a.classOfLocked(k.key)
	sh.put(h, k)
	sh.idle.pushFront(k)
	return k
}

// evictLocked stops tracking k, to make room for a new key in its shard:
// the caller counts the key it adds in its place.
func (a *Aggregator) evictLocked(sh *shard, k *keyState) {
	for k.pend != nil {
		// Its superseded holds can no longer be followed: decide now.
		a.resolvePendingLocked(k, k.pend, true, false)
	}
	if k.held {
		k.held = false
		k.class.held--
	}
	unlink(k)
	sh.del(k)
	sh.release(k)
}

// warmLocked returns the hashes of the keys of evs, and loads what applying
// them will read from memory. Over many distinct keys (or keys arriving in
// a new order) each lookup misses the cache: an index of 200 000 keys spans
// megabytes. Made here for a whole chunk, one after the other without
// waiting for each, the misses overlap; made one per event by
// applyLocked, each costs a full trip to memory. The same goes for the keys
// a full shard will evict (see warmVictimsLocked).
func (a *Aggregator) warmLocked(evs []event.Event) []uint64 {
	hs := a.hashes[:0]
	var sum uint64
	var fresh [maxShards]uint16 // per shard: events whose key is not at its home slot
	var prev uint64
	for i := range evs {
		h := a.keys.hash(evs[i].Key)
		hs = append(hs, h)
		e := a.keys.shardOf(h).peek(h)
		sum += e
		if uint32(e>>32) != uint32(h>>32) && (h != prev || i == 0) {
			fresh[h&a.keys.mask]++
		}
		prev = h
	}
	a.hashes, a.warm = hs, sum+a.warmVictimsLocked(&fresh)
	return hs
}

// warmVictimsLocked loads the keys that full shards will evict for the new
// keys of a chunk: each shard's least recently active idle keys, as many as
// the chunk has events that may bring a new key there (fresh: events whose
// key is not at its home slot in the index, but for the second of adjacent
// events of one key, such as a short hold's acquisition and release; other
// events of a new key count again, and the extra victims loaded are the
// next chunk's). A stream of distinct keys (order ids) evicts one key per
// acquisition, and evicting reads a key that has been idle longest, so is
// cold: its state (four cache lines, all rewritten when its slot is freed
// for the new key), its index slot and its ring buffer, which the new key
// takes over. Read one after the other as keyLocked evicts, these were a
// third of applying such a stream. Here the shards' idle lists are walked
// side by side, a step each per round, so that the misses of different
// shards overlap. Runs under mu alone, like the index loads: every writer
// of the lists holds mu. Returns the sum of the loads.
func (a *Aggregator) warmVictimsLocked(fresh *[maxShards]uint16) uint64 {
	var at [maxShards]*keyState // per shard: the next victim to load, or nil
	var left [maxShards]int
	shards := a.keys.shards
	more := false
	for i := range shards {
		sh := &shards[i]
		if n := sh.count + int(fresh[i]) - sh.cap; n > 0 { // count <= cap: n > 0 needs fresh keys
			at[i], left[i], more = sh.idle.back(), min(n, int(fresh[i])), true
		}
	}
	var sum uint64
	for more {
		more = false
		for i := range shards {
			v := at[i]
			if v == nil || v == &shards[i].idle.root {
				continue
			}
			sum += uint64(len(v.key)) + uint64(v.hash) + uint64(v.expiresAt) + uint64(v.recN)
			sum += shards[i].peek(uint64(v.hash) << 32)
			if cap(v.recent) > 0 && cap(v.recent) <= reusedRingCap {
				sum += uint64(v.recent[:1][0])
			}
			if left[i]--; left[i] > 0 {
				at[i], more = v.prev, true
			}
		}
	}
	return sum
}

// applyLocked applies one event; now is the collector's clock.
func (a *Aggregator) applyLocked(e *event.Event, now int64) {
	a.applyHashedLocked(e, a.keys.hash(e.Key), now)
}

// applyHashedLocked is applyLocked with the hash of e.Key.
func (a *Aggregator) applyHashedLocked(e *event.Event, h uint64, now int64) {
	if !e.Type.Valid() {
		a.Malformed(1)
		return
	}
	if !a.muted {
		a.tot.Events[e.Type].Inc()
	}
	a.eventsTotal++
	ts := e.TS
	if ts <= 0 || ts > now {
		ts = now
	}
	if ts > a.evMax {
		a.evMax, a.evAt = ts, now
	}
	if e.Type == event.Dropped {
		if e.Count > 0 {
			a.dropped += e.Count
			if !a.muted {
				a.tot.Dropped.Add(float64(e.Count))
			}
		}
		return
	}
	sh := a.keys.shardOf(h)
	sh.mu.Lock()
	k := a.keyLocked(sh, h, e.Key)
	c := k.class
	var ownerRef ref
	if e.Owner == k.owner {
		ownerRef = ref{s: k.owner, id: k.ownerID}
	} else {
		ownerRef = a.internLocked(e.Owner)
	}
	owner := ownerRef.s
	lease := leaseOf(k, e.Lease)
	r := &a.recBufs[0]
	*r = record{ts: ts, typ: e.Type, owner: ownerRef, lease: ref{s: lease}, fence: e.Fence,
		reason: a.internLocked(e.Reason), attempts: int32(min(e.Attempts, 1<<30))}
	a.rec, a.recKey = r, k
	if e.Degraded {
		r.flags |= recDegraded
	}
	if e.Passive {
		r.flags |= recPassive
	}
	wait := max(e.Wait, 0)
	hold := max(e.Hold, 0)

	switch e.Type {
	case event.Waiting:
		a.waits.add(e, c.name, ts)
		r.who = a.internLocked(e.Holder)

	case event.Acquired:
		a.waits.end(e.Lease)
		r.d = int64(wait)
		r.ttlMS = int32(min(e.TTL.Milliseconds(), 1<<31-1))
		contended := e.Attempts > 1
		c.m.Acquisitions.Inc()
		k.acquisitions++
		a.cur.acquisitions++
		if contended {
			a.contendedLocked(k)
		}
		if e.Passive {
			// The passive watch sees the SET that took the lock, never
			// the failed SET NX before it: the wait is unknown, not zero.
			// It stays out of wait histograms and contention ratios.
			a.cur.passive++
		} else {
			a.waitLocked(k, wait, now)
		}
		a.observe(k, obsAcq, now, 0)
		a.hot.record(k.key, k.hash, c.name, contended, wait, true)
		if k.owner != "" && owner != k.owner {
			c.m.Handoffs.Inc()
		}
		if a.olderAcquisitionLocked(k, lease, owner, ts, e.TTL) {
			break
		}
		if k.held && !k.matches(lease, owner) {
			a.supersedeLocked(k, ts)
		}
		if !k.held {
			k.held = true
			c.held++
			unlink(k)
			sh.held.pushFront(k)
		}
		k.owner, k.lease, k.since, k.ttl, k.fence = owner, lease, ts, max(e.TTL, 0), e.Fence
		k.expiresAt = 0
		if k.ttl > 0 {
			k.expiresAt = ts + int64(k.ttl)
			a.expiries.push(k.expiresAt, k)
		}
		k.degraded, k.passive, k.ended = e.Degraded, e.Passive, endNone
		if c.oldest == 0 || ts < c.oldest {
			c.oldest = ts
		}

	case event.Failed:
		a.waits.end(e.Lease)
		r.d = int64(wait)
		r.who = a.internLocked(e.Holder)
		reason := failureIndex(e.Reason)
		c.m.Failures[reason].Inc()
		k.failures++
		a.cur.failures++
		if reason == reasonHeld {
			a.contendedLocked(k)
			a.cur.refused++
		}
		a.waitLocked(k, wait, now)
		a.hot.record(k.key, k.hash, c.name, reason == reasonHeld, wait, false)

	case event.Released:
		r.d = int64(hold)
		if e.Reason == event.ReasonNotOwner {
			c.m.Releases[1].Inc()
			break
		}
		c.m.Releases[0].Inc()
		a.endEventLocked(sh, k, lease, owner, ts, hold, endReleased)

	case event.Lost:
		r.d = int64(hold)
		a.endEventLocked(sh, k, lease, owner, ts, hold, endLost)

	case event.Forced:
		r.d = int64(hold)
		r.who = a.internLocked(e.By)
		c.m.Forced.Inc()
		a.cur.forced++
		held := hold
		if held == 0 && k.matches(lease, owner) {
			held = time.Duration(ts - k.since)
		}
		a.forced.add(ForcedRelease{Key: k.key, Class: c.name, Owner: owner, By: r.who.s, Reason: r.reason.s,
			At: time.Unix(0, ts), Held: held})
		a.endEventLocked(sh, k, lease, owner, ts, hold, endForced)

	case event.Expired:
		r.d = int64(hold)
		a.expiredEventLocked(sh, k, lease, owner, ts, hold, e.Passive)

	case event.Renewed:
		r.d = int64(max(e.TTL, 0))
		a.renewedLocked(sh, k, lease, owner, ts, max(e.TTL, 0), e)

	case event.RenewFailed:
		c.m.RenewalFailures.Inc()
	}
	k.lastEvent = ts
	if k.owner == owner {
		k.ownerID = ownerRef.id
	}
	// Keep both lists in order of recent activity: eviction takes the back.
	unlink(k)
	if k.held {
		sh.held.pushFront(k)
	} else {
		sh.idle.pushFront(k)
	}
	a.pushLocked(k, r)
	a.rec, a.recKey = nil, nil
	sh.mu.Unlock()
}

func (a *Aggregator) contendedLocked(k *keyState) {
	k.class.m.Contentions.Inc()
	k.contentions++
	a.cur.contentions++
}

func (a *Aggregator) waitLocked(k *keyState, wait time.Duration, now int64) {
	c := k.class
	c.m.Wait.Observe(wait.Seconds())
	a.cur.wait.add(wait)
	k.waitTotal += int64(wait)
	a.observe(k, obsWait, now, wait)
}

func (a *Aggregator) holdLocked(k *keyState, hold time.Duration) {
	k.class.m.Hold.Observe(hold.Seconds())
	a.cur.hold.add(hold)
	k.holdTotal += int64(hold)
	a.observe(k, obsHold, 0, hold)
}

// endedAlready reports whether an end event for lease/owner refers to a
// hold whose end was already recorded.
func (k *keyState) endedAlready(lease, owner string) bool {
	if k.held || k.ended == endNone {
		return false
	}
	if lease != "" && k.lease != "" {
		return lease == k.lease
	}
	return owner == k.owner
}

// prevOf returns the superseded (pending) hold of k that lease/owner
// refers to, or nil.
func (k *keyState) prevOf(lease, owner string) *pendingHold {
	for p := k.pend; p != nil; p = p.next {
		if lease != "" && p.lease != "" {
			if lease == p.lease {
				return p
			}
		} else if owner != "" && owner == p.owner {
			return p
		}
	}
	return nil
}

// endEventLocked applies a released, lost or forced event: it ends the hold
// it refers to, once. A lost event at or after the hold's expiry means the
// TTL lapsed while held: it counts as an expiration.
// lostSlack is how early before the expiry we computed a holder may find its
// lock gone because its TTL lapsed: the expiry is computed from the
// renewal's event time, which is taken after Redis set the TTL (one round
// trip later). A tenth of the TTL, between 2 ms and 1 s.
func lostSlack(ttl time.Duration) int64 {
	return int64(min(max(ttl/10, 2*time.Millisecond), time.Second))
}

func (a *Aggregator) endEventLocked(sh *shard, k *keyState, lease, owner string, ts int64, hold time.Duration, how uint8) {
	switch {
	case k.matches(lease, owner):
		if hold == 0 {
			hold = time.Duration(ts - k.since)
		}
		if how == endLost && k.expiresAt > 0 && ts >= k.expiresAt-lostSlack(k.ttl) {
			a.expireLocked(sh, k, k.expiresAt, time.Duration(k.expiresAt-k.since), false, "lost")
			return
		}
		a.endHoldLocked(sh, k, how, hold)
	case k.prevOf(lease, owner) != nil:
		p := k.prevOf(lease, owner)
		if how == endLost && ts >= p.expires-lostSlack(time.Duration(p.expires-p.since)) {
			a.resolvePendingLocked(k, p, true, false)
			return
		}
		if hold == 0 {
			hold = time.Duration(max(ts-p.since, 0))
		}
		counted := p.counted
		a.resolvePendingLocked(k, p, false, false)
		if !counted {
			a.holdLocked(k, hold)
		}
	case !k.endedAlready(lease, owner):
		// A hold we never saw begin (collector started mid-hold, or its
		// start was superseded): its own figure is all there is.
		a.holdLocked(k, hold)
	}
}

// endHoldLocked ends k's current hold.
func (a *Aggregator) endHoldLocked(sh *shard, k *keyState, how uint8, hold time.Duration) {
	k.held = false
	k.ended = how
	k.class.held--
	unlink(k)
	sh.idle.pushFront(k)
	if k.revived {
		k.revived = false // its hold time was observed when it was declared expired
		return
	}
	a.holdLocked(k, hold)
}

// supersedeLocked handles an acquisition by another lease while k is still
// held in our view: the old hold's end has not arrived (events from
// different emitters interleave) or never will. If the new acquisition came
// after the old hold's expiry, the old hold may have expired while held:
// it waits in the pending slot until its end event (released before expiry)
// or the expiry grace decides.
func (a *Aggregator) supersedeLocked(k *keyState, ts int64) {
	k.held = false
	k.class.held--
	if k.expiresAt > 0 && ts >= k.expiresAt {
		a.parkLocked(k, &pendingHold{lease: k.lease, owner: k.owner, since: k.since, expires: k.expiresAt, counted: k.revived})
	}
	k.revived = false
}

// parkLocked adds p to k's pending holds, deciding the oldest as expired if
// k has too many.
func (a *Aggregator) parkLocked(k *keyState, p *pendingHold) {
	if k.pend == nil {
		a.pendingKeys = append(a.pendingKeys, k)
	}
	p.next, k.pend = k.pend, p
	n, last := 0, p
	for q := p; q != nil; q = q.next {
		n, last = n+1, q
	}
	if n > maxPending {
		a.resolvePendingLocked(k, last, true, false)
	}
}

// sameHold reports whether lease/owner names k's current (or last) hold,
// held or not.
func (k *keyState) sameHold(lease, owner string) bool {
	if lease != "" && k.lease != "" {
		return lease == k.lease
	}
	return owner == k.owner
}

// olderAcquisitionLocked handles an acquisition, by another lease, from
// before the start of k's current (or last) hold: it describes an older
// hold whose events reached the stream late (each process's emitter
// flushes on its own schedule). The caller has counted it (acquisitions,
// wait, contention, handoff); it does not take the key from the hold we
// know, and its end events, matching neither that hold nor the pending
// one, observe their hold time and end nothing else. Like an in-order
// supersede, an older hold whose TTL ran out before the known hold began
// may have expired while held: it is parked in the pending slot (if free)
// until its late end event or the expiry grace decides. An older hold whose
// TTL ran past the known hold's start must have ended before it: it is
// never counted as expired. Reports whether ts was such an acquisition.
func (a *Aggregator) olderAcquisitionLocked(k *keyState, lease, owner string, ts int64, ttl time.Duration) bool {
	if k.since == 0 || ts >= k.since || k.sameHold(lease, owner) || k.prevOf(lease, owner) != nil {
		return false
	}
	if ttl > 0 && ts+int64(ttl) <= k.since {
		a.parkLocked(k, &pendingHold{lease: lease, owner: owner, since: ts, expires: ts + int64(ttl)})
	}
	return true
}

// resolvePendingLocked decides p, one of k's superseded holds: expired, or
// ended by an event that arrived late.
func (a *Aggregator) resolvePendingLocked(k *keyState, p *pendingHold, expired, confirmed bool) {
	at := &k.pend
	for *at != nil && *at != p {
		at = &(*at).next
	}
	if p == nil || *at == nil {
		return
	}
	*at = p.next
	p.next = nil
	if expired && !p.counted {
		a.countExpirationLocked(k, p.owner, p.lease, p.expires, time.Duration(p.expires-p.since), confirmed)
		a.holdLocked(k, time.Duration(p.expires-p.since))
	}
	if k.pend == nil {
		if i := slices.Index(a.pendingKeys, k); i >= 0 {
			a.pendingKeys = slices.Delete(a.pendingKeys, i, i+1)
		}
	}
}

// expireLocked ends k's current hold as expired-while-held.
func (a *Aggregator) expireLocked(sh *shard, k *keyState, at int64, hold time.Duration, confirmed bool, reason string) {
	switch {
	case !k.revived:
		a.countExpirationLocked(k, k.owner, k.lease, at, hold, confirmed)
	case confirmed:
		a.exps.confirm(k.expSeq) // the expiration counted when it was declared
	}
	outer, outerKey := a.rec, a.recKey
	if outer != nil && outerKey == k && outer.obs != 0 && k.stats == nil {
		// The expiry's record goes into the ring before the event's own:
		// should it push an observation out, the event's must be counted.
		a.materializeLocked(k)
	}
	r := &a.recBufs[1]
	*r = record{ts: at, typ: event.Expired, owner: a.internLocked(k.owner), lease: ref{s: k.lease}, d: int64(hold),
		reason: a.internLocked(reason)}
	a.rec, a.recKey = r, k
	a.endHoldLocked(sh, k, endExpired, hold)
	a.pushLocked(k, r)
	a.rec, a.recKey = outer, outerKey
}

func (a *Aggregator) countExpirationLocked(k *keyState, owner, lease string, at int64, hold time.Duration, confirmed bool) {
	k.class.m.Expirations.Inc()
	a.cur.expirations++
	k.expSeq = a.exps.add(Expiration{Key: k.key, Class: k.class.name, Owner: owner, Lease: lease,
		At: time.Unix(0, at), Held: hold, Confirmed: confirmed})
}

// expiredEventLocked applies an expired event from an emitter or watcher.
func (a *Aggregator) expiredEventLocked(sh *shard, k *keyState, lease, owner string, ts int64, hold time.Duration, passive bool) {
	switch {
	case k.matches(lease, owner):
		if hold == 0 {
			hold = time.Duration(ts - k.since)
		}
		a.expireLocked(sh, k, ts, hold, passive, "")
	case k.prevOf(lease, owner) != nil:
		a.resolvePendingLocked(k, k.prevOf(lease, owner), true, passive)
	case k.endedAlready(lease, owner):
		if k.ended == endExpired && passive {
			a.exps.confirm(k.expSeq)
		}
	case lease != "" || k.lease == "":
		// A hold we never tracked: count it, once.
		a.countExpirationLocked(k, owner, lease, ts, hold, passive)
		a.holdLocked(k, hold)
	}
}

// renewedLocked applies a renewal: the hold's TTL and expiry move.
func (a *Aggregator) renewedLocked(sh *shard, k *keyState, lease, owner string, ts int64, ttl time.Duration, e *event.Event) {
	setTTL := func() {
		k.ttl = ttl
		k.expiresAt = 0
		if ttl > 0 {
			k.expiresAt = ts + int64(ttl)
			a.expiries.push(k.expiresAt, k)
		}
		k.degraded, k.passive = e.Degraded, e.Passive
	}
	switch {
	case k.matches(lease, owner):
		setTTL()
	case k.prevOf(lease, owner) != nil:
		// A late renewal of a superseded hold. If it ran past the start of
		// the current hold, the old hold ended before that by an end event
		// still to come (or lost), not by expiry.
		p := k.prevOf(lease, owner)
		if ttl <= 0 || ts+int64(ttl) > k.since {
			a.resolvePendingLocked(k, p, false, false)
		} else {
			p.expires = ts + int64(ttl)
		}
	case k.held:
		// Another lease holds the key in our view; a renewal cannot succeed
		// for two leases, so keep the holder we know.
	case k.endedAlready(lease, owner) && k.ended != endExpired:
		// Renewed after its release: a duplicate or reordered entry.
	default:
		// Either the expiry we declared was wrong (a renewal succeeding
		// proves the lock was still held; the counter keeps its count) or
		// we never saw this hold begin: held at least since now.
		resumed := k.endedAlready(lease, owner)
		k.revived = resumed // only an expired hold gets here ended and renewed
		k.held = true
		k.class.held++
		unlink(k)
		sh.held.pushFront(k)
		k.ended = endNone
		if !resumed {
			k.owner, k.lease, k.since, k.fence = owner, lease, ts, e.Fence
		}
		setTTL()
	}
}

// KeyExpired records a keyspace notification: key expired now. It confirms
// an expiry at once; a notification for a hold already counted only marks
// that expiration confirmed.
func (a *Aggregator) KeyExpired(key string) {
	now := a.nowNS()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.replaying == 0 {
		a.advanceLocked(now)
	}
	sh, h := a.keys.find(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.get(h, key)
	if k == nil {
		return
	}
	clock := a.eventClock(now)
	switch {
	case k.pend != nil && !(k.held && k.expiresAt > 0 && clock >= k.expiresAt):
		// A superseded (or late older) hold is the one that expired: the
		// current holder's acquisition was applied before this
		// notification arrived, and its own TTL has not lapsed yet. Of the
		// pending holds, the one whose TTL lapsed last before now.
		var exp *pendingHold
		for p := k.pend; p != nil; p = p.next {
			if exp == nil || (p.expires <= clock && (exp.expires > clock || p.expires > exp.expires)) {
				exp = p
			}
		}
		a.resolvePendingLocked(k, exp, true, true)
	case k.held:
		a.expireLocked(sh, k, clock, time.Duration(clock-k.since), true, "keyspace")
	case k.ended == endExpired:
		a.exps.confirm(k.expSeq)
	}
}

// Tick declares expired the holds whose TTL lapsed more than ExpiryGrace ago
// by the event clock, decides superseded holds whose grace has passed, and
// (at most once a second, the thresholds being minutes) refreshes the stuck
// and oldest-hold figures of every class and looks for deadlocks.
func (a *Aggregator) Tick() {
	now := a.nowNS()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.replaying > 0 {
		return // the windows follow the replayed events' time
	}
	a.advanceLocked(now)
	a.unparkDueLocked(now)
	a.expireDueLocked(a.eventClock(now))
	if a.lastScan != 0 && now-a.lastScan < int64(scanEvery) && now >= a.lastScan {
		return
	}
	a.scanLocked(now, a.eventClock(now))
	a.scanWaitsLocked(a.eventClock(now))
}

// scanEvery is how often Tick scans every key (stuck and oldest holds) and
// the waiters (deadlocks).
const scanEvery = time.Second

// expireDueLocked declares expired the holds whose TTL lapsed more than
// ExpiryGrace before clock, and decides superseded holds the same way.
func (a *Aggregator) expireDueLocked(clock int64) {
	grace := int64(a.cfg.ExpiryGrace)
	for len(a.expiries) > 0 && clock > a.expiries[0].at+grace {
		it := a.expiries.pop()
		if !it.live() {
			continue
		}
		k := it.k
		sh, _ := a.keys.find(k.key)
		sh.mu.Lock()
		a.expireLocked(sh, k, k.expiresAt, time.Duration(k.expiresAt-k.since), false, "ttl")
		sh.mu.Unlock()
	}
	// Live entries are at most one per held key; the rest are stale. Bound
	// by the held keys, not all tracked ones: a stream of short holds over
	// many keys otherwise keeps a heap of a TTL's worth of stale entries,
	// each popped at its expiry from deep in a heap too big for the cache
	// (and its key, long cold, read to find it stale). Compacted early, the
	// heap stays small and the keys it reads are recent.
	if n := len(a.expiries); n > 4096 && n > 4*a.heldLocked()+4096 {
		a.expiries.compact()
	}
	for i := 0; i < len(a.pendingKeys); {
		k := a.pendingKeys[i]
		sh, _ := a.keys.find(k.key)
		sh.mu.Lock()
		for p := k.pend; p != nil; {
			next := p.next
			if clock > p.expires+grace {
				a.resolvePendingLocked(k, p, true, false) // the last removes k from pendingKeys
			}
			p = next
		}
		gone := k.pend == nil
		sh.mu.Unlock()
		if !gone {
			i++
		}
	}
}

// heldLocked returns the number of keys held.
func (a *Aggregator) heldLocked() int {
	n := 0
	for _, c := range a.classes {
		n += c.held
	}
	return n
}

// scanLocked refreshes the stuck and oldest-hold figures of every class.
func (a *Aggregator) scanLocked(now, clock int64) {
	a.lastScan = now
	for _, c := range a.classes {
		c.stuck, c.noExpiry, c.oldest = 0, 0, 0
	}
	for i := range a.keys.shards {
		sh := &a.keys.shards[i]
		sh.mu.Lock()
		sh.held.each(func(k *keyState) bool {
			c := k.class
			if clock-k.since > int64(c.stuckAfter) {
				c.stuck++
			}
			if k.passive && k.ttl <= 0 && k.expiresAt == 0 {
				c.noExpiry++
			}
			if c.oldest == 0 || k.since < c.oldest {
				c.oldest = k.since
			}
			return true
		})
		sh.mu.Unlock()
	}
}

// expRing keeps the most recent expirations.
type expRing struct {
	buf  [ringLen]Expiration
	seq  [ringLen]uint64
	next uint64 // sequence of the next entry; sequences start at 1
}

func (r *expRing) add(e Expiration) uint64 {
	r.next++
	i := r.next % ringLen
	r.buf[i], r.seq[i] = e, r.next
	return r.next
}

func (r *expRing) confirm(seq uint64) {
	if i := seq % ringLen; seq != 0 && r.seq[i] == seq {
		r.buf[i].Confirmed = true
	}
}

// newest returns up to n entries, newest first.
func (r *expRing) newest(n int) []Expiration {
	n = min(n, int(min(r.next, ringLen)))
	out := make([]Expiration, 0, max(n, 0))
	for s := r.next; len(out) < n; s-- {
		out = append(out, r.buf[s%ringLen])
	}
	return out
}

// forcedRing keeps the most recent forced releases.
type forcedRing struct {
	buf  [ringLen]ForcedRelease
	next uint64
}

func (r *forcedRing) add(f ForcedRelease) {
	r.next++
	r.buf[r.next%ringLen] = f
}

func (r *forcedRing) newest(n int) []ForcedRelease {
	n = min(n, int(min(r.next, ringLen)))
	out := make([]ForcedRelease, 0, max(n, 0))
	for s := r.next; len(out) < n; s-- {
		out = append(out, r.buf[s%ringLen])
	}
	return out
}

// Passive releases are parked for parkFor before they are applied. A forced
// release of another library's lock deletes the key: the keyspace watcher
// reports a release at once, and the forced event follows through the stream
// a moment later. Parked, the release gives way to that forced event (one
// forced release, not a release and a forced one); otherwise it is applied
// with its own time once parkFor has passed (Tick), or before any later
// event of its key.
const (
	parkFor   = 750 * time.Millisecond
	maxParked = 10_000
)

type parkedRelease struct {
	e   event.Event
	due int64 // unix ns by the aggregator's clock
}

// parkReleaseLocked parks a passive release; false means apply it now.
func (a *Aggregator) parkReleaseLocked(e *event.Event, now int64) bool {
	if a.replaying > 0 {
		return false
	}
	if a.forcedAlreadyLocked(e.Key, e.Owner) {
		return true // the forced event came first: it is the whole story
	}
	if len(a.parked) >= maxParked {
		return false
	}
	if a.parked == nil {
		a.parked = make(map[string]parkedRelease)
	}
	p := *e
	p.Key, p.Owner = strings.Clone(e.Key), strings.Clone(e.Owner)
	// Parked for less than ExpiryGrace: a key deleted just before its
	// deadline is released before Tick could take it for an expiry.
	a.parked[p.Key] = parkedRelease{e: p, due: now + int64(min(parkFor, a.cfg.ExpiryGrace*3/4))}
	return true
}

// forcedAlreadyLocked reports whether key's last hold, by owner, ended with
// a forced release.
func (a *Aggregator) forcedAlreadyLocked(key, owner string) bool {
	sh, h := a.keys.find(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.get(h, key)
	return k != nil && !k.held && k.ended == endForced && k.owner == owner
}

// unparkForLocked settles the parked release of e's key before e: a forced
// release of the same holder replaces it, anything else follows it.
func (a *Aggregator) unparkForLocked(e *event.Event, now int64) {
	p, ok := a.parked[e.Key]
	if !ok {
		return
	}
	delete(a.parked, e.Key)
	if e.Type == event.Forced && e.Owner == p.e.Owner {
		return
	}
	a.applyLocked(&p.e, now)
}

// unparkDueLocked applies the parked releases whose time has come.
func (a *Aggregator) unparkDueLocked(now int64) {
	for key, p := range a.parked {
		if now >= p.due {
			delete(a.parked, key)
			a.applyLocked(&p.e, now)
		}
	}
}

package state

import (
	"sync"
	"sync/atomic"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/event/class"
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
//   - Stuck: held longer than StuckAfter, or than the threshold of the
//     first of StuckRules matching the class's name. The
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
//     release (the hold had already ended) adds nothing. Nor does the
//     late word of a holder whose hold was forced away or expired (it
//     finds its lock lost at its next renewal, maybe after a successor's
//     acquisition): after an expiry that word marks the expiration as one
//     under a working holder (Expiration.HolderWorking), the dangerous
//     kind: two holders may have run at once.
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
// A tracked key costs about 400 bytes: its state in a slab (272 bytes), its
// index entry, key and lease, and its recent events encoded at some 30 bytes
// each (see ring.go). Its distributions and series (keyStats, 288
// bytes) exist only once its ring has overflowed; until then they are
// replayed from the ring. With the default MaxKeys of 200 000 that is about
// 80 MB, and a stream of 10 M distinct keys peaks at about 230 MB of RSS
// with the Go runtime's default GOGC (BenchmarkDistinctKeys10M;
// BENCHMARKS.md).
//
// Whatever the stream carries, memory stays bounded: strings are cut where
// they enter and keys too long are skipped (limits.go), a ring never passes
// maxRingBytes, and each shard evicts past its share of Config.MaxBytes
// what its keys keep beyond their slots (keyState.cost) as it does past
// MaxKeys. Waiters (waiters.go), parked releases, the hot-key sketches
// (hotkeys.go) and the rings of expirations and forced releases are
// bounded in number, with strings so cut. Each class keeps its figures
// over the last hour in fixed buckets, some 52 KB (class_window.go). The streams that make the state
// keep the most leave some 210 MB live with the defaults
// (BenchmarkHostileWorstCase). The lock-order graph (lockorder.go) adds at
// most some 20 MB: its holds by lease, edges and cycles are bounded.
//
// # Clocks
//
// The hot-key windows are cut by the collector's clock (Config.Now) when
// events are applied. The per-step series (the overview's) count each event
// in the step of its own time, clamped to the collector's clock, however
// late it is read (within the series' ten minutes): a replica that reads a
// backlog (after its replay at start, or lagging) shows what one that kept
// up shows. Holds are timed by the event clock: an event's
// TS, clamped to the collector's clock (no event is from the future). Expiry
// and stuck detection compare holds against the newest applied event time
// advanced by the wall time since it was applied, so a collector replaying
// a backlog does not declare holds expired that were renewed in events it
// has not read yet.
type Aggregator struct {
	cfg   Config
	rules class.Rules
	met   Metrics // where the figures are counted (Config.Metrics)
	tot   Totals  // met's state-wide figures
	keys  *keyTable
	hot   *hotKeys

	tracked   atomic.Int64
	malformed atomic.Int64
	gap       atomic.Int64
	lastEvent atomic.Int64 // evMax, for readers that do not take mu

	parts partitions // each partition's health, lag and pending (partitions.go)

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
	replaying   int                  // replays between BeginReplay and EndReplay
	replayAt    int64                // the replay's clock: the newest replayed event time
	muted       bool                 // counters go nowhere (see Replay)
	waits       waits                // live waiters (waiters.go)
	hashes      []uint64             // the hashes of the chunk being applied (warmLocked)
	warm        uint64               // the sum of warmLocked's loads: used, so they stay
	incSeen     recentIDs            // incidents counted (incidents.go)
	byLoss      bool                 // the expiry being applied was reported by its holder (a lost event): no holder_expired incident
	scanClock   int64                // event clock of the last stuck scan; 0 before the first (every stuck hold is then recorded)
	stuckBefore int64                // holds stuck before this (unix ns: the previous incarnation's stop, EndReplay) were counted by it
	incMuted    bool                 // incidentLocked records without counting (see scanLocked)
	queues      map[string]openQueue // keys whose wait queue is an open incident
	order       *lockOrder           // the lock-order graph (lockorder.go)

	requests map[string]*pendingRequest // release requests awaiting their answer, by key and lease (requests.go)

	watches    map[string][]*overlapWatch // superseded holds that may still believe they hold their key (overlap.go)
	nWatches   int
	watchOrder []*overlapWatch // the watches in the order they were made, decided ones among them
	silent     silentExps      // expirations whose holder may still speak (silent.go)

	recentOverlaps overlapRing
}

// maxDroppedReport is the most one dropped event counts: a million events
// a second dropped for 12 days. An emitter reports the events it dropped
// since its last report; a count beyond this one is forged or corrupt, and
// would make lockscope_events_dropped_total meaningless (one report of 2^63-1
// took it to 9.2e18), so it counts this much.
const maxDroppedReport = 1 << 40

const (
	applyChunk  = 512  // events applied per hold of mu
	maxInterned = 4096 // distinct owner/reason strings shared between records
	ringLen     = 256  // recent expirations and forced releases kept
)

// New returns an Aggregator configured by cfg.
func New(cfg Config) *Aggregator {
	cfg = cfg.withDefaults()
	a := &Aggregator{
		cfg:     cfg,
		rules:   class.NewRules(cfg.Classes),
		keys:    newKeyTable(cfg.MaxKeys, cfg.MaxBytes),
		classes: make(map[string]*classState),
		tab:     internTab{ids: make(map[string]uint32)},
	}
	a.waits.init()
	a.order = newLockOrder(cfg.LockOrderWindow)
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
// stream entry; Apply clones what it keeps, cut to the limits of limits.go
// (an event whose key is longer than MaxKeyBytes is skipped).
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
			e, ok := a.clip(&chunk[i])
			if !ok {
				continue
			}
			if len(a.parked) > 0 {
				a.unparkForLocked(e, now)
			}
			if e.Type == event.Released && e.Passive && a.parkReleaseLocked(e, now) {
				continue
			}
			a.applyHashedLocked(e, hs[i], now)
		}
		a.lastEvent.Store(a.evMax)
		a.mu.Unlock()
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

// StreamGap counts entries trimmed from the stream before they were read.
func (a *Aggregator) StreamGap(missing int64) {
	if missing <= 0 {
		return
	}
	a.gap.Add(missing)
	a.tot.StreamGap.Add(float64(missing))
}

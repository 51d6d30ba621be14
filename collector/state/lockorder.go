package state

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockscope/lockscope/event"
)

// The lock-order graph: lockdep for distributed locks.
//
// An acquired event lists the leases its call already held (the library's
// Lease.Context and Do, the adapters' WithHeld, Python's contextvar). Each
// names a hold whose own acquired event gave its key and class, so every
// such acquisition says "class B was taken while holding class A": an edge
// A → B of the graph, kept with how often, by which owners, when first and
// last seen and the latest pair of keys. The rule, in one sentence: two or
// more classes whose edges form a cycle within the window are a lock-order
// inversion, since callers taking them in those orders at the same time
// would deadlock. Nothing has to wait for it to be seen: the orders may be
// taken hours apart by services that never met.
//
// What is not an inversion: one order taken by many owners is one edge; a
// class taken while holding the same class (re-entrant and read locks,
// or two keys of one class) makes no self-loop; the overflow class (other)
// stands for many classes and makes no edge; an edge not seen for the
// window (Config.LockOrderWindow) ages out, so a fixed inversion stops being
// reported a window after the last acquisition in the old order.
//
// Acquisitions read before the acquired event of a lease they hold (it
// came through another partition) wait for it up to orderPendingFor of
// event time. An ended hold is remembered orderHoldGrace longer for the same
// reason, unless room is short: when the holds fill their bound (a busy
// service ends more holds within the grace than the graph keeps), the ended
// ones are forgotten at once and each later hold at its end, until a prune
// (every orderPruneEvery) finds that the rate holds end at would keep no
// more than half the bound within the grace. A hold still held is never
// forgotten for room.
//
// Memory: at most MaxOrderEdges edges, each with at most MaxOrderOwners
// owners (strings the state keeps anyway, cut at MaxTextBytes) and one key
// pair (at most 2 × MaxKeyBytes): under 4 MB in all; at most maxOrderHolds
// holds known by lease and maxOrderHoldBytes of their strings (16 MiB); at
// most maxOrderPending acquisitions waiting for their held lease; at most
// maxInversions cycles.

// DefaultLockOrderWindow is how long an edge of the lock-order graph is kept
// after it was last seen, by default.
const DefaultLockOrderWindow = 24 * time.Hour

// Lock-order bounds.
const (
	// MaxOrderOwners is the most owners one edge lists (the first seen);
	// OrderEdge.MoreOwners says when there were more.
	MaxOrderOwners = 8
	// MaxOrderEdges is the most edges the graph keeps; LockOrder.Dropped
	// counts the acquisitions of orders beyond.
	MaxOrderEdges = 1024
	// maxOrderHolds is the most holds the graph knows by lease (an
	// acquisition's key and class, kept until its end or expiry and
	// orderHoldGrace after, or at once when room is short): when all of them
	// are still held, an acquisition under a hold it does not know makes no
	// edge. Aggregator.LockOrderHolds says how many now.
	maxOrderHolds = 1 << 17

	maxOrderHoldBytes = 16 << 20
	orderHoldCost     = 96 // bytes of a hold besides its lease and key: map slot, struct, string headers
	maxOrderPending   = 1024
	maxInversions     = 256

	orderPendingFor = 10 * time.Second
	orderHoldGrace  = 30 * time.Second
	orderPruneEvery = 10 * time.Second
)

// OrderEdge is one edge of the lock-order graph: locks of class To were
// acquired while holding a lock of class From.
type OrderEdge struct {
	From, To string
	// Count is how many acquisitions took To while holding From.
	Count int64
	// Owners are the first MaxOrderOwners owners that did; MoreOwners is
	// true when more did.
	Owners     []string
	MoreOwners bool
	// FirstSeen and LastSeen are the event times of the first and latest
	// such acquisition.
	FirstSeen, LastSeen time.Time
	// FromKey and ToKey are the keys of the latest: an example pair.
	FromKey, ToKey string
}

// Inversion is a cycle of two or more classes in the lock-order graph:
// Orders[i] took Classes[i+1] (cyclically) while holding Classes[i].
type Inversion struct {
	Classes []string
	Orders  []OrderEdge
	// Owners are the owners of every order, each once.
	Owners []string
	// FirstSeen is when the cycle closed (the latest of its orders' first
	// acquisitions); LastSeen is the latest acquisition in any of them.
	FirstSeen, LastSeen time.Time
}

// LockOrder is the lock-order graph: its edges (sorted by From, To) and
// its inversions (shortest first).
type LockOrder struct {
	Edges      []OrderEdge
	Inversions []Inversion
	// Window is how long an edge is kept after it was last seen.
	Window time.Duration
	// Dropped counts acquisitions of orders not tracked because the graph
	// had MaxOrderEdges edges.
	Dropped int64
}

// LockOrderSink receives the edges of the lock-order graph that changed
// (the collector's store keeps them in Redis, shared by every replica and
// read back at start, see RestoreLockOrder). It is called with the state's
// lock held: it must return at once and not call back into the state.
type LockOrderSink interface {
	LockOrderEdges([]OrderEdge)
}

type orderPair struct{ from, to string }

// orderHold is what an acquired event said of a hold: its key and class.
type orderHold struct {
	key, class string
	until      int64 // event time past which it is forgotten; 0: not known (no TTL and not ended)
	ended      bool  // its end was applied: kept for the grace only
}

type orderEdge struct {
	count          int64
	owners         []string
	more           bool
	first, last    int64
	fromKey, toKey string
	counted        int64 // restored: acquisitions at or before this time are in count already
}

// orderPending is an acquisition under a lease whose own acquired event
// has not been read yet.
type orderPending struct {
	held, to, key, owner string
	ts                   int64
}

// lockOrder is the graph. The holds and the acquisitions waiting for one
// are the writers' (Aggregator.mu); the edges and cycles are behind mu, a
// leaf held briefly, never while taking another lock, so that an
// acquisition holding nothing costs no lock of its own.
type lockOrder struct {
	window    time.Duration
	holds     map[string]orderHold // by lease
	holdBytes int
	holdCount atomic.Int64 // len(holds), for a reader without the state's lock
	lastPrune int64
	pending   []orderPending
	// short: the holds filled their bound; until a prune finds that the
	// grace would keep no more than half of it at the rate holds end, a
	// hold is forgotten at its end.
	short     bool
	ends      int64 // holds ended since the last periodic prune
	lastCheck int64 // event time of that prune

	mu      sync.Mutex
	edges   map[orderPair]*orderEdge
	dirty   map[orderPair]struct{} // changed since the last flush to the sink
	cycles  [][]string             // found by the last scan
	changed bool                   // edges added or removed since the last scan
	dropped int64
}

func newLockOrder(window time.Duration) *lockOrder {
	return &lockOrder{window: window, holds: make(map[string]orderHold), edges: make(map[orderPair]*orderEdge),
		dirty: make(map[orderPair]struct{})}
}

// orderLocked feeds the lock-order graph with one applied event of key
// (of class) by owner under lease, at ts. Called by applyHashedLocked.
func (a *Aggregator) orderLocked(e *event.Event, class, key, owner, lease string, ts int64) {
	if lease == "" || e.Passive {
		return // a watched lock: no caller listed what it held
	}
	o := a.order
	switch e.Type {
	case event.Acquired:
		o.acquiredLocked(e, class, key, owner, lease, ts)
	case event.Renewed:
		if h, ok := o.holds[lease]; ok && h.until != 0 && e.TTL > 0 {
			h.until = max(h.until, after(after(ts, e.TTL), orderHoldGrace))
			o.holds[lease] = h
		}
	case event.Released, event.Lost, event.Forced, event.Expired:
		if h, ok := o.holds[lease]; ok {
			o.ends++
			if o.short {
				o.forgetLocked(lease, h)
				o.holdCount.Store(int64(len(o.holds)))
				return
			}
			h.until = after(ts, orderHoldGrace)
			h.ended = true
			o.holds[lease] = h
		}
	}
}

func (o *lockOrder) acquiredLocked(e *event.Event, class, key, owner, lease string, ts int64) {
	if _, ok := o.holds[lease]; ok {
		return // the same acquisition twice (an XADD retried after its reply was lost): counted once
	}
	held := e.HeldLeases()
	var froms [4]string // classes already counted for this acquisition
	done := froms[:0]
	for _, l := range held {
		h, ok := o.holds[l]
		switch {
		case l == lease:
			continue
		case !ok:
			if len(o.pending) < maxOrderPending {
				// l shares memory with the stream entry (see Apply): kept, it is copied.
				o.pending = append(o.pending, orderPending{held: strings.Clone(l), to: class, key: key, owner: owner, ts: ts})
			}
			continue
		case slices.Contains(done, h.class):
			continue
		}
		done = append(done, h.class)
		o.mu.Lock()
		o.observeLocked(h, class, key, owner, ts)
		o.mu.Unlock()
	}
	cost := orderHoldCost + len(lease) + len(key)
	if len(o.holds) >= maxOrderHolds || o.holdBytes+cost > maxOrderHoldBytes {
		// Full: prune now, forgetting every ended hold, but at most once
		// a second of event time (a pass over every hold), so a full map
		// of holds that never end costs each acquisition nothing more.
		if ts-o.lastPrune >= int64(time.Second) {
			o.short = true
			before := len(o.holds)
			o.pruneLocked(ts)
			if len(o.holds) < before/2 {
				// A map keeps the room it grew to: the holds left
				// (those still held, often few) go to one of their
				// size, which the lookups that follow find in cache.
				// A map of holds still held is left as it is.
				holds := make(map[string]orderHold, len(o.holds))
				for l, h := range o.holds {
					holds[l] = h
				}
				o.holds = holds
			}
		}
		if len(o.holds) >= maxOrderHolds || o.holdBytes+cost > maxOrderHoldBytes {
			return // acquisitions under this hold will make no edge
		}
	}
	h := orderHold{key: key, class: class}
	if e.TTL > 0 {
		h.until = after(after(ts, e.TTL), orderHoldGrace)
	}
	o.holds[lease] = h
	o.holdBytes += cost
	o.holdCount.Store(int64(len(o.holds)))
}

// observeLocked counts one acquisition of key (of class to) by owner at ts
// while holding h. Called with o.mu held.
func (o *lockOrder) observeLocked(h orderHold, to, key, owner string, ts int64) {
	if h.class == to || h.class == otherClass || to == otherClass || h.class == "" || to == "" {
		return
	}
	p := orderPair{h.class, to}
	ed := o.edges[p]
	if ed == nil {
		if len(o.edges) >= MaxOrderEdges {
			o.dropped++
			return
		}
		ed = &orderEdge{first: ts, last: ts}
		o.edges[p] = ed
		o.changed = true
	}
	if ts <= ed.counted {
		return
	}
	ed.count++
	ed.first = min(ed.first, ts)
	if ts >= ed.last {
		ed.last, ed.fromKey, ed.toKey = ts, h.key, key
	}
	switch {
	case owner == "" || slices.Contains(ed.owners, owner):
	case len(ed.owners) < MaxOrderOwners:
		ed.owners = append(ed.owners, owner)
	default:
		ed.more = true
	}
	o.dirty[p] = struct{}{}
}

// pruneLocked forgets the holds past their time.
func (o *lockOrder) pruneLocked(clock int64) {
	o.lastPrune = clock
	for l, h := range o.holds {
		if h.until != 0 && h.until < clock || o.short && h.ended {
			o.forgetLocked(l, h)
		}
	}
	o.holdCount.Store(int64(len(o.holds)))
}

func (o *lockOrder) forgetLocked(lease string, h orderHold) {
	delete(o.holds, lease)
	o.holdBytes -= orderHoldCost + len(lease) + len(h.key)
}

// scanLockOrderLocked resolves the acquisitions waiting for their held
// lease, ages edges out of the window, finds the cycles again if edges came
// or went, and hands the changed edges to Config.LockOrder. Called by Tick
// with mu held, at the event clock.
func (a *Aggregator) scanLockOrderLocked(clock int64) {
	o := a.order
	if clock-o.lastPrune >= int64(orderPruneEvery) {
		o.pruneLocked(clock)
		if o.short {
			// The holds the grace would keep at the rate they ended
			// since the last prune, besides those held now: under half
			// the bound, ended holds get their grace again.
			period := int64(orderPruneEvery)
			if o.lastCheck != 0 {
				period = max(clock-o.lastCheck, period)
			}
			kept := float64(o.ends) * float64(orderHoldGrace+orderPruneEvery) / float64(period)
			if float64(len(o.holds))+kept < maxOrderHolds/2 && o.holdBytes < maxOrderHoldBytes/2 {
				o.short = false
			}
		}
		o.ends, o.lastCheck = 0, clock
	}
	o.mu.Lock()
	if len(o.pending) > 0 {
		keep := o.pending[:0]
		for _, p := range o.pending {
			if h, ok := o.holds[p.held]; ok {
				o.observeLocked(h, p.to, p.key, p.owner, p.ts)
			} else if p.ts >= clock-int64(orderPendingFor) {
				keep = append(keep, p)
			}
		}
		clear(o.pending[len(keep):])
		o.pending = keep
	}
	cutoff := clock - int64(o.window)
	for p, ed := range o.edges {
		if ed.last < cutoff {
			delete(o.edges, p)
			delete(o.dirty, p)
			o.changed = true
		}
	}
	if o.changed {
		o.cycles = findCycles(o.edges)
		o.changed = false
	}
	var out []OrderEdge
	if a.cfg.LockOrder != nil && len(o.dirty) > 0 {
		out = make([]OrderEdge, 0, len(o.dirty))
		for p := range o.dirty {
			out = append(out, o.edges[p].export(p))
		}
		clear(o.dirty)
	}
	o.mu.Unlock()
	if len(out) > 0 {
		a.cfg.LockOrder.LockOrderEdges(out)
	}
}

func (ed *orderEdge) export(p orderPair) OrderEdge {
	return OrderEdge{From: p.from, To: p.to, Count: ed.count, Owners: slices.Clone(ed.owners), MoreOwners: ed.more,
		FirstSeen: time.Unix(0, ed.first), LastSeen: time.Unix(0, ed.last), FromKey: ed.fromKey, ToKey: ed.toKey}
}

// RestoreLockOrder adds edges kept from before this process started (the
// collector's store, written by every replica). An acquisition applied
// later at or before a restored edge's LastSeen (within its millisecond:
// the store keeps no finer) is taken as counted in it already: the
// replayed stream holds acquisitions the store has counted.
// Edges out of the window, self-loops, edges of the overflow class and
// strings over the state's limits are left out: the store is only as
// trustworthy as whoever can write to Redis.
func (a *Aggregator) RestoreLockOrder(edges []OrderEdge) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cutoff := a.eventClock(a.nowNS()) - int64(a.order.window)
	o := a.order
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range edges {
		last, first := r.LastSeen.UnixNano(), r.FirstSeen.UnixNano()
		if r.From == r.To || r.From == "" || r.To == "" || r.From == otherClass || r.To == otherClass ||
			len(r.From) > MaxKeyBytes || len(r.To) > MaxKeyBytes || last < cutoff || r.Count <= 0 {
			continue
		}
		p := orderPair{r.From, r.To}
		ed := o.edges[p]
		if ed == nil {
			if len(o.edges) >= MaxOrderEdges {
				o.dropped++
				continue
			}
			ed = &orderEdge{first: first, last: last}
			o.edges[p] = ed
			o.changed = true
		}
		ed.count = max(ed.count, r.Count)
		// The store keeps milliseconds: every acquisition within the last
		// one is counted in it.
		ed.counted = max(ed.counted, last+int64(time.Millisecond)-1)
		if first > 0 && first < ed.first {
			ed.first = first
		}
		if last > ed.last {
			ed.last = last
			ed.fromKey, ed.toKey = cutString(r.FromKey, MaxKeyBytes), cutString(r.ToKey, MaxKeyBytes)
		}
		for _, ow := range r.Owners {
			switch ow = cutString(ow, MaxTextBytes); {
			case ow == "" || slices.Contains(ed.owners, ow):
			case len(ed.owners) < MaxOrderOwners:
				ed.owners = append(ed.owners, ow)
			default:
				ed.more = true
			}
		}
		ed.more = ed.more || r.MoreOwners
	}
}

// LockOrder returns the lock-order graph: every edge and inversion, or,
// for a class, the edges from or to it and the inversions through it.
func (a *Aggregator) LockOrder(class string) LockOrder {
	o := a.order
	o.mu.Lock()
	defer o.mu.Unlock()
	out := LockOrder{Window: o.window, Dropped: o.dropped, Edges: []OrderEdge{}, Inversions: []Inversion{}}
	for p, ed := range o.edges {
		if class == "" || p.from == class || p.to == class {
			out.Edges = append(out.Edges, ed.export(p))
		}
	}
	slices.SortFunc(out.Edges, func(x, y OrderEdge) int {
		if c := cmp.Compare(x.From, y.From); c != 0 {
			return c
		}
		return cmp.Compare(x.To, y.To)
	})
	for _, c := range o.cycles {
		if class != "" && !slices.Contains(c, class) {
			continue
		}
		if in, ok := o.inversion(c); ok {
			out.Inversions = append(out.Inversions, in)
		}
	}
	return out
}

// LockOrderInversions returns the number of inversions found by the last
// scan: lockscope_lock_order_inversions.
func (a *Aggregator) LockOrderInversions() int {
	a.order.mu.Lock()
	defer a.order.mu.Unlock()
	return len(a.order.cycles)
}

// inversion describes cycle c from the current edges; ok is false if one
// of them has aged out since the scan that found it.
func (o *lockOrder) inversion(c []string) (Inversion, bool) {
	in := Inversion{Classes: slices.Clone(c)}
	for i, from := range c {
		p := orderPair{from, c[(i+1)%len(c)]}
		ed := o.edges[p]
		if ed == nil {
			return Inversion{}, false
		}
		e := ed.export(p)
		in.Orders = append(in.Orders, e)
		for _, ow := range e.Owners {
			if !slices.Contains(in.Owners, ow) {
				in.Owners = append(in.Owners, ow)
			}
		}
		if e.FirstSeen.After(in.FirstSeen) {
			in.FirstSeen = e.FirstSeen
		}
		if e.LastSeen.After(in.LastSeen) {
			in.LastSeen = e.LastSeen
		}
	}
	return in, true
}

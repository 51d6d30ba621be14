package state

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/lockscope/lockscope/event"
)

// Live waiters and the wait-for graph.
//
// A waiting event (the library's obtain found the lock held and will retry)
// adds a waiter; the acquired or failed event of the same lease ends it. A
// waiter whose end never comes (its process died) is dropped once its
// deadline has passed (plus ExpiryGrace), or defaultWaitBound after it
// began (or was last said again: a repeated waiting event of the same
// lease) when it had no deadline: the live picture keeps no ghosts.
//
// The wait-for graph links a waiting call to the call that holds the lock it
// waits on: the key's current holder lease, held by a call that itself
// waits (its waiting event listed the leases it holds). Each waiter waits on
// one key, so every node has at most one edge: a cycle is found by following
// the edges. A cycle is a deadlock, whatever the processes: two goroutines
// of one process waiting on each other's keys are one as much as two
// services are.

// defaultWaitBound is how long a waiter without a deadline is kept.
const defaultWaitBound = 5 * time.Minute

// maxWaiters and maxWaiterBytes bound the waiters kept; past either new
// waits are not tracked. 100 000 waiters of the library's events (short
// strings) cost some 30 MB; with every string at its limit (limits.go)
// the bytes bound first, at some 17 000.
const (
	maxWaiters     = 100_000
	maxWaiterBytes = 32 << 20
)

// LiveWaiters returns, per key, the callers waiting at now among evs: the
// rule the Aggregator keeps its live waiters by, for a reader that has only
// the stream's events (the operator command line). A waiting event begins a
// wait, the same lease's acquired or failed event ends it, and a wait whose
// end never came is dropped DefaultExpiryGrace past its deadline (the
// caller's, or defaultWaitBound after it began). evs, from any number of
// partitions, are sorted in place by time; times past now count as now.
func LiveWaiters(evs []event.Event, now time.Time) map[string]int {
	slices.SortStableFunc(evs, func(a, b event.Event) int { return cmp.Compare(a.TS, b.TS) })
	var w waits
	w.init()
	at := now.UnixNano()
	for i := range evs {
		e := &evs[i]
		switch e.Type {
		case event.Waiting:
			ts := e.TS
			if ts <= 0 || ts > at {
				ts = at
			}
			w.add(e, "", ts)
		case event.Acquired, event.Failed:
			w.end(e.Lease, 0, "")
		}
	}
	w.expire(at - int64(DefaultExpiryGrace))
	out := make(map[string]int, len(w.byKey))
	for key, q := range w.byKey {
		out[key] = q.n
	}
	return out
}

// waiter is one obtain call waiting for a lock.
type waiter struct {
	key, class, owner, lease, holder string
	since, deadline                  int64 // event clock, unix ns
	gives                            int64 // the caller's deadline; 0: it gave none (deadline is then the state's bound)
	held                             []string
	trace                            event.TraceID // of the waiting call

	prev, next *waiter // in its key's queue, in order of arrival
	due        int     // index in waits.due
}

// queue is the waiters of one key in order of arrival: a doubly linked
// list, so that a waiter leaves it in O(1) wherever it stands.
type queue struct {
	head, tail *waiter
	n          int
}

func (q *queue) push(x *waiter) {
	x.prev, x.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = x
	} else {
		q.head = x
	}
	q.tail = x
	q.n++
}

func (q *queue) remove(x *waiter) {
	if x.prev != nil {
		x.prev.next = x.next
	} else {
		q.head = x.next
	}
	if x.next != nil {
		x.next.prev = x.prev
	} else {
		q.tail = x.prev
	}
	x.prev, x.next = nil, nil
	q.n--
}

// waits is the live waiters. Its mutex is a leaf: held briefly, never while
// taking another lock.
//
// Every change costs O(1) or O(log n) in the waiters: a wait ends through
// its lease (a map), leaves its key's queue (a linked list) and the heap of
// deadlines; expiry pops that heap. 100 000 callers waiting for one key and
// dying together were dropped one scan of the key's slice each, O(n²): 7 s
// of ingestion stalled (BENCHMARKS.md, issue 27).
type waits struct {
	mu      sync.Mutex
	byLease map[string]*waiter
	byKey   map[string]*queue
	due     []dueItem            // min-heap on deadline
	holding map[*waiter]struct{} // waiters that hold leases: the only possible members of a cycle
	cycles  map[string]Cycle     // current cycles by member leases
	scanned bool                 // a scan has run (the first records every cycle as an incident)

	// How the current cycles broke, for their incidents: the cycle of each
	// member's lease and of each key a member holds, and the first end of
	// a member's wait (or forced release of a member's key) since the last
	// scan, by cycle.
	memberOf map[string]string // lease -> cycle id
	heldIn   map[string]string // key a member holds -> cycle id
	broken   map[string]waitEnd
	bytes    int // what the waiters cost (waiter.cost)
}

// waitEnd is how and when a wait ended.
type waitEnd struct {
	at  int64
	how string
}

// waiterOverhead is what a waiter costs besides its strings: the struct,
// its entries in the maps, the heap and the queue.
const waiterOverhead = int(unsafe.Sizeof(waiter{})) + 100

// cost is what x costs, counted against maxWaiterBytes.
func (x *waiter) cost() int { return waiterCost(x.key, x.owner, x.lease, x.holder, x.held) }

func waiterCost(key, owner, lease, holder string, held []string) int {
	n := waiterOverhead + len(key) + len(owner) + len(lease) + len(holder)
	for _, l := range held {
		n += len(l) + 16 // and its string header
	}
	return n
}

func (w *waits) init() {
	w.byLease = make(map[string]*waiter)
	w.byKey = make(map[string]*queue)
	w.holding = make(map[*waiter]struct{})
	w.cycles = make(map[string]Cycle)
	w.broken = make(map[string]waitEnd)
}

// breakLocked records that cycle id broke at at (the first end counts).
func (w *waits) breakLocked(id string, at int64, how string) {
	if _, done := w.broken[id]; id != "" && !done {
		w.broken[id] = waitEnd{at, how}
	}
}

// forced records an operator's forced release of key at at: it breaks a
// cycle one of whose members held key.
func (w *waits) forced(key string, at int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.breakLocked(w.heldIn[key], at, event.Forced.String())
}

// add records a waiting event of key (class) at ts.
func (w *waits) add(e *event.Event, class string, ts int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x := w.byLease[e.Lease]; x != nil {
		// The same wait said again by whoever still sees it (the passive
		// watcher, of a Redisson caller subscribed to the lock's channel):
		// one without a deadline of its own is kept another bound from now.
		if x.gives == 0 && e.Wait <= 0 && ts+int64(defaultWaitBound) > x.deadline {
			x.deadline = ts + int64(defaultWaitBound)
			w.due[x.due].deadline = x.deadline
			w.downDue(x.due)
		}
		return
	}
	if e.Lease == "" || len(w.byLease) >= maxWaiters {
		return
	}
	bound := e.Wait
	if bound <= 0 || bound > defaultWaitBound {
		bound = defaultWaitBound
	}
	held := e.HeldLeases()
	cost := waiterCost(e.Key, e.Owner, e.Lease, e.Holder, held)
	if w.bytes+cost > maxWaiterBytes {
		return
	}
	for i := range held {
		held[i] = strings.Clone(held[i])
	}
	x := &waiter{key: strings.Clone(e.Key), class: class, owner: strings.Clone(e.Owner), lease: strings.Clone(e.Lease),
		holder: strings.Clone(e.Holder), since: ts, deadline: ts + int64(bound), held: held, trace: e.TraceID}
	if e.Wait > 0 {
		x.gives = ts + int64(e.Wait)
	}
	w.bytes += cost
	w.byLease[x.lease] = x
	q := w.byKey[x.key]
	if q == nil {
		q = &queue{}
		w.byKey[x.key] = q
	}
	q.push(x)
	w.pushDue(x)
	if len(held) > 0 {
		w.holding[x] = struct{}{}
	}
}

// end removes the waiter of lease: its wait ended at at, how (acquired,
// timed_out, canceled, failed).
func (w *waits) end(lease string, at int64, how string) {
	if lease == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if x := w.byLease[lease]; x != nil {
		w.removeLocked(x)
		w.breakLocked(w.memberOf[lease], at, how)
	}
}

// failedHow is how a wait that failed with reason ended.
func failedHow(reason string) string {
	switch reason {
	case event.ReasonTimeout:
		return EndedTimedOut
	case event.ReasonCanceled:
		return EndedCanceled
	}
	return EndedFailed
}

func (w *waits) removeLocked(x *waiter) {
	w.bytes -= x.cost()
	delete(w.byLease, x.lease)
	if q := w.byKey[x.key]; q != nil {
		q.remove(x)
		if q.n == 0 {
			delete(w.byKey, x.key)
		}
	}
	w.removeDue(x.due)
	if len(x.held) > 0 {
		delete(w.holding, x)
	}
}

// expire drops the waiters whose deadline passed before clock.
func (w *waits) expire(clock int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.due) > 0 && w.due[0].deadline < clock {
		x := w.due[0].x
		w.removeLocked(x)
		w.breakLocked(w.memberOf[x.lease], x.deadline, EndedTimedOut)
	}
}

// dueItem is an entry of the heap of deadlines. It carries the deadline
// so that sifting reads the heap alone, not each waiter it passes.
type dueItem struct {
	deadline int64
	x        *waiter
}

// pushDue adds x to the heap of deadlines.
func (w *waits) pushDue(x *waiter) {
	x.due = len(w.due)
	w.due = append(w.due, dueItem{x.deadline, x})
	w.upDue(x.due)
}

// removeDue removes the entry at index i of the heap of deadlines.
func (w *waits) removeDue(i int) {
	last := len(w.due) - 1
	if i != last {
		w.swapDue(i, last)
	}
	w.due[last] = dueItem{}
	w.due = w.due[:last]
	if i != last {
		w.downDue(i)
		w.upDue(i)
	}
}

func (w *waits) swapDue(i, j int) {
	w.due[i], w.due[j] = w.due[j], w.due[i]
	w.due[i].x.due, w.due[j].x.due = i, j
}

func (w *waits) upDue(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if w.due[p].deadline <= w.due[i].deadline {
			return
		}
		w.swapDue(i, p)
		i = p
	}
}

func (w *waits) downDue(i int) {
	n := len(w.due)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && w.due[r].deadline < w.due[l].deadline {
			m = r
		}
		if w.due[i].deadline <= w.due[m].deadline {
			return
		}
		w.swapDue(i, m)
		i = m
	}
}

// count returns the waiters of key.
func (w *waits) count(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.byKey[key]; q != nil {
		return q.n
	}
	return 0
}

// counts returns the number of waiters of every key that has some.
func (w *waits) counts() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.byKey))
	for k, q := range w.byKey {
		out[k] = q.n
	}
	return out
}

// total returns all waiters.
func (w *waits) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byLease)
}

// snapshot copies the waiters, oldest first.
func (w *waits) snapshot() []waiter {
	w.mu.Lock()
	out := make([]waiter, 0, len(w.byLease))
	for _, x := range w.byLease {
		out = append(out, x.copy())
	}
	w.mu.Unlock()
	sortWaiters(out)
	return out
}

// snapshotHolding is snapshot restricted to the waiting calls that hold
// leases: every member of a cycle does (it waits while holding the lock
// another member waits for), so they are all a cycle search needs.
func (w *waits) snapshotHolding() []waiter {
	w.mu.Lock()
	out := make([]waiter, 0, len(w.holding))
	for x := range w.holding {
		out = append(out, x.copy())
	}
	w.mu.Unlock()
	sortWaiters(out)
	return out
}

// copy returns x without its links into the waits' structures.
func (x *waiter) copy() waiter {
	c := *x
	c.prev, c.next, c.due = nil, nil, 0
	return c
}

// sortWaiters orders ws oldest first, ties by lease.
func sortWaiters(ws []waiter) {
	slices.SortFunc(ws, func(a, b waiter) int {
		if a.since != b.since {
			return cmp.Compare(a.since, b.since)
		}
		return strings.Compare(a.lease, b.lease)
	})
}

// keyQueue is a key's wait queue as incidents see it: how many wait, the
// oldest waiter (by since, ties by lease) and the since of the min-th
// oldest.
type keyQueue struct {
	key            string
	n              int
	first          string // lease of the oldest waiter
	since, minthAt int64
}

// queuesOf returns the queues of min or more waiters, keys in any order.
// Keys with fewer waiters cost nothing; a queue of n costs O(n), no sort.
func (w *waits) queuesOf(min int) []keyQueue {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []keyQueue
	older := func(a, b *waiter) bool { return a.since < b.since || a.since == b.since && a.lease < b.lease }
	for key, q := range w.byKey {
		if q.n < min {
			continue
		}
		oldest := make([]*waiter, 0, min) // the min oldest, oldest first
		for x := q.head; x != nil; x = x.next {
			if len(oldest) == min && !older(x, oldest[min-1]) {
				continue
			}
			i := len(oldest)
			if i == min {
				i--
			} else {
				oldest = append(oldest, nil)
			}
			for ; i > 0 && older(x, oldest[i-1]); i-- {
				oldest[i] = oldest[i-1]
			}
			oldest[i] = x
		}
		out = append(out, keyQueue{key: key, n: q.n, first: oldest[0].lease, since: oldest[0].since, minthAt: oldest[min-1].since})
	}
	return out
}

// keyWaiters copies up to n of key's waiters, oldest first (by arrival).
func (w *waits) keyWaiters(key string, n int) []waiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.byKey[key]
	if q == nil {
		return nil
	}
	out := make([]waiter, 0, min(q.n, n))
	for x := q.head; x != nil && len(out) < n; x = x.next {
		out = append(out, x.copy())
	}
	return out
}

// holderOf returns the current holder of a key (held false when the key is
// not held).
type holderOf func(key string) holding

// graph is the wait-for graph over a snapshot of the waiters.
type graph struct {
	ws   []waiter
	next []int // index of the waiter the waiter waits on (through the key's holder), -1: a holder that does not wait
	hold []holding
}

// holding is what a waiter waits on: the key's holder.
type holding struct {
	lease, owner string
	since        int64
	held         bool
	trace        event.TraceID // of the hold
}

func buildGraph(ws []waiter, holder holderOf) graph {
	g := graph{ws: ws, next: make([]int, len(ws)), hold: make([]holding, len(ws))}
	heldBy := make(map[string]int) // lease -> the waiter (call) that holds it
	for i, x := range ws {
		for _, l := range x.held {
			heldBy[l] = i
		}
	}
	for i, x := range ws {
		g.next[i] = -1
		g.hold[i] = holder(x.key)
		if !g.hold[i].held {
			continue
		}
		if j, waits := heldBy[g.hold[i].lease]; waits {
			g.next[i] = j
		}
	}
	return g
}

// cycles returns the cycles of the graph, each from its lowest index.
func (g graph) cycles() [][]int {
	state := make([]uint8, len(g.ws)) // 0 new, 1 on the current path, 2 done
	var out [][]int
	for s := range g.ws {
		var path []int
		i := s
		for i >= 0 && state[i] == 0 {
			state[i] = 1
			path = append(path, i)
			i = g.next[i]
		}
		if i >= 0 && state[i] == 1 {
			at := slices.Index(path, i)
			cyc := slices.Clone(path[at:])
			lo := slices.Index(cyc, slices.Min(cyc))
			out = append(out, append(cyc[lo:], cyc[:lo]...))
		}
		for _, j := range path {
			state[j] = 2
		}
	}
	return out
}

// chain returns the waiters from i along the edges, stopping at a holder that
// does not wait or where the path repeats (a cycle).
func (g graph) chain(i int) []int {
	var out []int
	seen := make(map[int]bool)
	for i >= 0 && !seen[i] {
		seen[i] = true
		out = append(out, i)
		i = g.next[i]
	}
	return out
}

// cycleOf turns a cycle of waiter indexes into what pages show.
func (g graph) cycleOf(c []int) Cycle {
	var cy Cycle
	for k, i := range c {
		x := g.ws[i]
		prev := g.ws[c[(k+len(c)-1)%len(c)]] // waits on the key this member holds
		cy.Members = append(cy.Members, CycleMember{Owner: x.owner, Lease: x.lease, WaitsFor: x.key,
			Holds: prev.key, Since: time.Unix(0, x.since), Trace: x.trace})
	}
	ids := make([]string, len(c))
	for i, m := range cy.Members {
		ids[i] = m.Lease
	}
	cy.id = strings.Join(ids, ",")
	return cy
}

func (x waiter) export() Waiter {
	w := Waiter{Key: x.key, Class: x.class, Owner: x.owner, Lease: x.lease, Holder: x.holder,
		Since: time.Unix(0, x.since), Holds: slices.Clone(x.held), Trace: x.trace}
	if x.gives != 0 {
		w.Deadline = time.Unix(0, x.gives)
	}
	return w
}

// scanWaits drops waiters past their deadline and updates the deadlock
// figures. Called by Tick with mu held (shard locks are taken one at a time
// through holderOf).
func (a *Aggregator) scanWaitsLocked(clock int64) {
	a.waits.expire(clock - int64(a.cfg.ExpiryGrace))
	ws := a.waits.snapshotHolding()
	g := buildGraph(ws, a.holderOf)
	now := make(map[string]Cycle)
	for _, c := range g.cycles() {
		cy := g.cycleOf(c)
		now[cy.id] = cy
	}
	var opened []Cycle
	var closed []brokenCycle
	a.waits.mu.Lock()
	for id, cy := range now {
		_, known := a.waits.cycles[id]
		if !known && !a.muted {
			a.tot.Deadlocks.Inc()
		}
		if !known || !a.waits.scanned {
			opened = append(opened, cy)
		}
	}
	for id, cy := range a.waits.cycles {
		if _, still := now[id]; !still {
			closed = append(closed, brokenCycle{cy, a.waits.broken[id]})
		}
	}
	a.waits.cycles = now
	a.waits.scanned = true
	a.waits.memberOf = make(map[string]string)
	a.waits.heldIn = make(map[string]string)
	for id, cy := range now {
		for _, m := range cy.Members {
			a.waits.memberOf[m.Lease] = id
			a.waits.heldIn[m.Holds] = id
		}
	}
	clear(a.waits.broken)
	a.waits.mu.Unlock()
	for _, cy := range opened {
		a.deadlockIncidentLocked(cy, waitEnd{})
	}
	for _, b := range closed {
		if b.end.at == 0 {
			b.end = waitEnd{clock, EndedResolved}
		}
		a.deadlockIncidentLocked(b.cycle, b.end)
	}
	a.queueIncidentsLocked(a.waits.queuesOf(waitQueueMin), clock) // every waiter: a queue need hold no lease
}

// brokenCycle is a cycle gone since the last scan, and how it broke.
type brokenCycle struct {
	cycle Cycle
	end   waitEnd
}

// knownCyclesLocked records the deadlocks among the replayed waiters that
// formed (their last member began to wait) before formedBefore as found
// already, so that the next scan does not count them: the previous
// incarnation found and counted them, and deadlocks_detected_total would
// otherwise count each deadlock again at every restart while it lasts.
// EndReplay passes a scan period before the previous incarnation stopped
// counting: a deadlock that formed in its last second may not have been
// scanned, and is counted here rather than risk counting it nowhere.
// Called with mu held.
func (a *Aggregator) knownCyclesLocked(formedBefore int64) {
	cycles := a.Deadlocks()
	a.waits.mu.Lock()
	defer a.waits.mu.Unlock()
	for _, cy := range cycles {
		var formed int64
		for _, m := range cy.Members {
			formed = max(formed, m.Since.UnixNano())
		}
		if formed < formedBefore {
			a.waits.cycles[cy.id] = cy
		}
	}
}

// deadlockCycles returns the number of cycles found by the last scan.
func (w *waits) deadlockCycles() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.cycles)
}

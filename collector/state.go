package collector

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/lockscope/lockscope/event"
)

// How a key's last hold ended (keyState.ended).
const (
	endNone uint8 = iota
	endReleased
	endLost
	endExpired
	endForced
)

// keyState is everything kept about one tracked key. It lives in one shard
// and is read and written only under that shard's lock. key and class never
// change after creation.
type keyState struct {
	key   string
	class *classState

	// prev/next link the key into its shard's held list while held, else
	// into its shard's idle list (least recently active at the back).
	prev, next *keyState

	// The current hold, or the last one when !held: LockInfo shows the
	// last owner of a free key.
	owner     string
	lease     string
	since     int64 // unix ns, event clock
	expiresAt int64 // unix ns, event clock; 0 when the TTL is unknown
	ttl       time.Duration
	fence     int64
	held      bool
	evicted   bool
	degraded  bool
	passive   bool
	ended     uint8  // how the last hold ended (end*)
	expSeq    uint64 // sequence of this key's last entry in the expirations ring

	// A hold superseded by another owner's acquisition that came after its
	// expiry: expired while held unless its end event (from before its
	// expiry) arrives late. prevExpires != 0 while pending.
	prevLease, prevOwner   string
	prevSince, prevExpires int64

	acquisitions int64
	contentions  int64
	failures     int64
	waitTotal    int64 // ns
	holdTotal    int64 // ns
	lastEvent    int64 // unix ns

	stats *keyStats // allocated at the first acquisition or failure

	// recent is a ring of the newest events, grown on demand up to
	// Config.RecentEvents so that keys seen once stay small.
	recent     []record
	recentNext int32
}

// matches reports whether an event for lease/owner refers to the current
// hold. An emitter that sends no lease is matched by owner.
func (k *keyState) matches(lease, owner string) bool {
	if !k.held {
		return false
	}
	if lease != "" && k.lease != "" {
		return lease == k.lease
	}
	return owner == "" || owner == k.owner
}

// record is a compact event in a key's recent ring (event.Event is 168
// bytes; this is 104, and its strings are interned or shared with the hold).
type record struct {
	ts       int64
	d        int64 // wait (acquired, failed), hold (released, lost, expired, forced), ttl (renewed), count (dropped)
	ttlMS    int32 // acquired: the TTL set
	attempts int32
	fence    int64
	owner    string
	lease    string
	reason   string
	who      string // failed: the holder; forced: the operator
	typ      event.Type
	flags    uint8
}

const (
	recDegraded = 1 << iota
	recPassive
)

func (r *record) event(key string) event.Event {
	e := event.Event{
		Type: r.typ, Key: key, Owner: r.owner, Lease: r.lease, TS: r.ts, Attempts: int(r.attempts),
		Fence: r.fence, Reason: r.reason, Degraded: r.flags&recDegraded != 0, Passive: r.flags&recPassive != 0,
	}
	d := time.Duration(r.d)
	switch r.typ {
	case event.Acquired:
		e.Wait, e.TTL = d, time.Duration(r.ttlMS)*time.Millisecond
	case event.Failed:
		e.Wait, e.Holder = d, r.who
	case event.Renewed:
		e.TTL = d
	case event.Dropped:
		e.Count = r.d
	case event.Forced:
		e.Hold, e.By = d, r.who
	default:
		e.Hold = d
	}
	return e
}

func (k *keyState) push(r record, max int) {
	if len(k.recent) < max {
		if len(k.recent) == cap(k.recent) {
			n := 2 * cap(k.recent)
			if n == 0 {
				n = 2
			}
			if n > max {
				n = max
			}
			grown := make([]record, len(k.recent), n)
			// Unroll the ring into oldest-first order while growing.
			copy(grown, k.recent[k.recentNext:])
			copy(grown[len(k.recent)-int(k.recentNext):], k.recent[:k.recentNext])
			k.recent = grown
			k.recentNext = 0
		}
		if k.recentNext == 0 {
			k.recent = append(k.recent, r)
			return
		}
	}
	k.recent[k.recentNext] = r
	k.recentNext++
	if int(k.recentNext) == len(k.recent) {
		k.recentNext = 0
	}
}

// newest returns the ring's events, newest first.
func (k *keyState) newest() []event.Event {
	n := len(k.recent)
	out := make([]event.Event, 0, n)
	// While the ring is still growing recentNext is 0 and the newest entry
	// is the last one; once full it is the one before recentNext.
	last := int(k.recentNext) - 1
	if last < 0 {
		last = n - 1
	}
	for i := 0; i < n; i++ {
		j := last - i
		if j < 0 {
			j += n
		}
		out = append(out, k.recent[j].event(k.key))
	}
	return out
}

// keyStats are a key's distributions and series, allocated lazily.
type keyStats struct {
	wait, hold dist
	// acq counts acquisitions per seriesStep over the last keySeriesLen
	// steps; waitNS is the waiting time per step over the last minute,
	// spread back over the steps each wait covered (see waitRing).
	acq    [keySeriesLen]uint32
	acqAt  int64 // step of the newest slot of acq
	waiter waitRing
}

// shard is one slice of the key space with its own lock, so a reader
// scanning keys holds up ingestion for one shard's worth of work at most.
type shard struct {
	// mu is a plain Mutex: ingestion takes it once per event and an
	// RWMutex costs two more atomic operations each time; readers are few
	// and brief, so sharing among them gains little.
	mu   sync.Mutex
	m    map[string]*keyState
	held list // keys held now
	idle list // keys not held, most recently active at the front
	cap  int  // keys this shard keeps before evicting idle ones
}

// list is an intrusive doubly linked list of keyStates with a sentinel.
type list struct{ root keyState }

func (l *list) init() { l.root.next, l.root.prev = &l.root, &l.root }

func (l *list) pushFront(k *keyState) {
	k.prev, k.next = &l.root, l.root.next
	l.root.next.prev = k
	l.root.next = k
}

func (l *list) back() *keyState {
	if l.root.prev == &l.root {
		return nil
	}
	return l.root.prev
}

func unlink(k *keyState) {
	k.prev.next = k.next
	k.next.prev = k.prev
	k.prev, k.next = nil, nil
}

// each calls f for every key of l until f returns false.
func (l *list) each(f func(*keyState) bool) {
	for k := l.root.next; k != &l.root; {
		next := k.next // f may move k
		if !f(k) {
			return
		}
		k = next
	}
}

// keyTable is the sharded map of tracked keys.
type keyTable struct {
	seed   maphash.Seed
	shards []shard
	mask   uint64
}

func newKeyTable(maxKeys int) *keyTable {
	// Enough keys per shard that per-shard LRU approximates a global one,
	// few enough that a reader's pass over one shard is short.
	n := 1
	for n < 64 && maxKeys/(n*2) >= 1024 {
		n *= 2
	}
	t := &keyTable{seed: maphash.MakeSeed(), shards: make([]shard, n), mask: uint64(n - 1)}
	for i := range t.shards {
		s := &t.shards[i]
		s.m = make(map[string]*keyState)
		s.held.init()
		s.idle.init()
		s.cap = maxKeys / n
		if i < maxKeys%n {
			s.cap++
		}
	}
	return t
}

func (t *keyTable) shardOf(key string) *shard {
	if t.mask == 0 {
		return &t.shards[0]
	}
	return &t.shards[maphash.String(t.seed, key)&t.mask]
}

package collector

import (
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"sync"
	"time"
)

// How a key's last hold ended (keyState.ended).
const (
	endNone uint8 = iota
	endReleased
	endLost
	endExpired
	endForced
)

// keyState is everything kept about one tracked key. It lives in a slab of
// its shard and is read and written only under that shard's lock. key and
// class never change while the key is tracked; an evicted key's slot is
// zeroed and reused (see shard.alloc).
type keyState struct {
	// What a Locks scan reads comes first, in the first 80 bytes: a scan
	// streams through the slab reading two cache lines of each key's 248
	// bytes, and the key's own bytes only to search.
	key         string
	kp          prefix // the key's first 16 bytes (see keyPrefix)
	since       int64  // unix ns, event clock: start of the current (or last) hold
	contentions int64
	waitTotal   int64 // ns
	holdTotal   int64 // ns
	used        bool  // the slot holds a tracked key
	held        bool
	degraded    bool
	passive     bool
	ended       uint8  // how the last hold ended (end*)
	recN        uint16 // records in recent

	class   *classState
	owner   string
	ownerID uint32 // owner's intern id (0: none), so that records need no lookup

	// prev/next link the key into its shard's held list while held, else
	// into its shard's idle list (least recently active at the back); a
	// free slot is linked into the shard's free list through next.
	prev, next *keyState

	// The current hold, or the last one when !held: LockInfo shows the
	// last owner of a free key.
	lease     string
	expiresAt int64 // unix ns, event clock; 0 when the TTL is unknown
	ttl       time.Duration
	fence     int64
	expSeq    uint64 // sequence of this key's last entry in the expirations ring

	pend *pendingHold // superseded holds awaiting their verdict, newest parked first; rarely set

	acquisitions int64
	failures     int64
	lastEvent    int64 // unix ns

	stats *keyStats // nil while the ring holds every observation (see state_ring.go)

	// recent holds the newest events, encoded (see state_ring.go): recN
	// records from recOff, timestamps relative to recBase.
	recent  []byte
	recBase int64
	recOff  int32
}

// pendingHold is a hold superseded by another owner's acquisition that
// came after its expiry (or an older hold, arriving late, whose TTL ran out
// before the known hold began): expired while held unless its end event
// (from before its expiry) arrives late. A key keeps at most maxPending of
// them, linked through next.
type pendingHold struct {
	lease, owner   string
	since, expires int64
	next           *pendingHold
}

// maxPending bounds the pending holds of one key: parking one more decides
// the oldest as expired.
const maxPending = 8

// prefix is the first 16 bytes of a key as two big-endian words, zero
// padded: comparing prefixes orders keys as strings.Compare does, unless
// they are equal. Sorting by key then rarely reads the keys themselves,
// which are scattered over the heap.
type prefix struct{ hi, lo uint64 }

func keyPrefix(key string) prefix {
	var b [16]byte
	copy(b[:], key)
	return prefix{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// compare orders p and q as the keys they start, as far as they go.
func (p prefix) compare(q prefix) int {
	if p.hi != q.hi {
		return cmp.Compare(p.hi, q.hi)
	}
	return cmp.Compare(p.lo, q.lo)
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

// keyStats are a key's distributions and series, allocated once its ring
// no longer holds all of them (see state_ring.go).
type keyStats struct {
	wait, hold dist
	// acq counts acquisitions per seriesStep over the last keySeriesLen
	// steps.
	acq   [keySeriesLen]uint32
	acqAt int64 // step of the newest slot of acq
}

// shard is one slice of the key space with its own lock, so a reader
// scanning keys holds up ingestion for one shard's worth of work at most.
type shard struct {
	// mu is a plain Mutex: ingestion takes it once per event and an
	// RWMutex costs two more atomic operations each time; readers are few
	// and brief, so sharing among them gains little.
	mu sync.Mutex
	// byHash indexes the shard's keys by their 64-bit hash, which picks the
	// shard and so is computed anyway: no second hashing of the key, and
	// 16-byte entries where a map keyed by string needs 24. A key whose
	// hash collides with another tracked key's goes to dup.
	byHash map[uint64]*keyState
	dup    map[string]*keyState
	count  int  // keys tracked
	held   list // keys held now
	idle   list // keys not held, most recently active at the front
	cap    int  // keys this shard keeps before evicting idle ones

	// Key states live in slabs rather than one allocation each: a scan
	// over all keys (Locks) then reads memory in order instead of chasing
	// a pointer per key, and evicting a key frees no memory for the
	// collector to find. Slots are never moved, so *keyState stays valid.
	slabs [][]keyState // each slabLen long but the last
	slots int          // in slabs
	n     int          // slots handed out so far
	free  *keyState    // freed slots, linked through next
}

// slabLen is the number of key states per slab (about 64 kB).
const slabLen = 256

// get returns the state of key (of hash h), or nil.
func (sh *shard) get(h uint64, key string) *keyState {
	if k := sh.byHash[h]; k != nil && k.key == key {
		return k
	}
	if sh.dup != nil {
		return sh.dup[key]
	}
	return nil
}

// put indexes k, of hash h, which get does not find.
func (sh *shard) put(h uint64, k *keyState) {
	if sh.byHash[h] == nil {
		sh.byHash[h] = k
	} else {
		if sh.dup == nil {
			sh.dup = make(map[string]*keyState)
		}
		sh.dup[k.key] = k
	}
	sh.count++
}

// del removes k, of hash h, from the index.
func (sh *shard) del(h uint64, k *keyState) {
	if sh.byHash[h] == k {
		delete(sh.byHash, h)
	} else {
		delete(sh.dup, k.key)
	}
	sh.count--
}

// alloc returns a zeroed slot marked used.
func (sh *shard) alloc() *keyState {
	k := sh.free
	if k != nil {
		sh.free = k.next
		k.next = nil
	} else {
		if sh.n == sh.slots {
			// Slabs add up to the shard's cap, which it never exceeds:
			// keyLocked evicts first.
			n := slabLen
			if rest := sh.cap - sh.n; rest > 0 {
				n = min(n, rest)
			}
			sh.slabs = append(sh.slabs, make([]keyState, n))
			sh.slots += n
		}
		k = &sh.slabs[sh.n/slabLen][sh.n%slabLen]
		sh.n++
	}
	k.used = true
	return k
}

// release zeroes k's slot (dropping what it references) and frees it.
// Pointers to k held elsewhere (stale expiry heap entries) then see a key
// that is not held, or a later key in the same slot, and check its state
// rather than its identity (see expiryItem.live).
func (sh *shard) release(k *keyState) {
	*k = keyState{next: sh.free}
	sh.free = k
}

// each calls f for every used slot, in slab order.
func (sh *shard) each(f func(*keyState)) {
	for i, slab := range sh.slabs {
		if rest := sh.n - i*slabLen; rest < slabLen {
			slab = slab[:rest]
		}
		for j := range slab {
			if k := &slab[j]; k.used {
				f(k)
			}
		}
	}
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
		s.byHash = make(map[uint64]*keyState)
		s.held.init()
		s.idle.init()
		s.cap = maxKeys / n
		if i < maxKeys%n {
			s.cap++
		}
	}
	return t
}

// hash returns the hash of key that picks its shard and indexes it there.
func (t *keyTable) hash(key string) uint64 { return maphash.String(t.seed, key) }

// shardOf returns the shard of the key of hash h.
func (t *keyTable) shardOf(h uint64) *shard { return &t.shards[h&t.mask] }

// find returns key's shard and hash.
func (t *keyTable) find(key string) (*shard, uint64) {
	h := t.hash(key)
	return t.shardOf(h), h
}

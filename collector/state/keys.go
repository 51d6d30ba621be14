package state

import (
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"strings"
	"sync"
	"time"
	"unsafe"

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

// keyState is everything kept about one tracked key. It lives in a slab of
// its shard and is read and written only under that shard's lock. key and
// class never change while the key is tracked; an evicted key's slot is
// zeroed and reused (see shard.release and shard.alloc).
type keyState struct {
	// What a Locks scan reads comes first, in the first 80 bytes: a scan
	// streams through the slab reading two cache lines of each key's 272
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
	revived     bool   // the hold was declared expired, then renewed: its expiration and hold time are counted
	ended       uint8  // how the last hold ended (end*)
	recN        uint16 // records in recent

	class   *classState
	owner   string
	ownerID uint32 // owner's intern id (0: none), so that records need no lookup
	slot    uint32 // index of this state in its shard's slabs; kept when freed

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
	endedAt   int64  // unix ns, event clock: when the last hold ended (see ended)
	// trace is the hold's: the trace of the call that obtained it (or,
	// unknown that, of its first traced event).
	trace event.TraceID

	pend *pendingHold // superseded holds awaiting their verdict, newest parked first; rarely set

	acquisitions int64
	failures     int64
	lastEvent    int64 // unix ns

	stats *keyStats // nil while the ring holds every observation (see ring.go)

	// recent holds the newest events, encoded (see ring.go): recN
	// records from recOff, timestamps relative to recBase.
	recent  []byte
	recBase int64
	recOff  int32
	hash    uint32 // the index's part of the key's hash (see shard.idx)

	// The headroom of the current (or last) hold's renewals, in ms plus
	// one (0: none seen): the last one's and the smallest (see
	// observeHeadroomLocked).
	headroomLast, headroomMin int32
}

// prefix is the first 16 bytes of a key as two big-endian words, zero
// padded: comparing prefixes orders keys as strings.Compare does, unless
// they are equal. Sorting by key then rarely reads the keys themselves,
// which are scattered over the heap.
type prefix struct{ hi, lo uint64 }

// prefixLen is the length of key a prefix holds.
const prefixLen = 16

func keyPrefix(key string) prefix {
	var b [prefixLen]byte
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
// no longer holds all of them (see ring.go).
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
	// idx indexes the shard's keys: an open-addressing table probed
	// linearly, at most half full, each entry the top 32 bits of a key's
	// 64-bit hash (which picks the shard and so is computed anyway) over its
	// slot number plus one; 0 is empty. A Go map did the same job, but keys
	// stream through a shard that evicts one for each it adds, and the
	// tombstones a map leaves on delete lengthened the probe of every
	// lookup of a new key to several cache misses; a deletion here shifts
	// the entries after it back, leaving none. Entries hold no pointers:
	// the garbage collector skips the table. Keys whose hashes collide
	// (in full or in part) are entries like any other; get compares keys.
	// Written under Aggregator.mu and mu; Aggregator.warmLocked reads it
	// under Aggregator.mu alone, which excludes every writer.
	idx   hashIndex
	count int  // keys tracked
	held  list // keys held now
	idle  list // keys not held, most recently active at the front
	cap   int  // keys this shard keeps before evicting idle ones

	bytes    int // the cost of its keys (keyState.cost)
	maxBytes int // the cost past which it evicts idle keys

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

// idxMinLen is the length of a shard's index when its first key comes.
const idxMinLen = 16

// at returns the state in slot i.
func (sh *shard) at(i uint32) *keyState { return &sh.slabs[i/slabLen][i%slabLen] }

// get returns the state of key (of hash h), or nil.
func (sh *shard) get(h uint64, key string) *keyState {
	if len(sh.idx) == 0 {
		return nil
	}
	mask := uint32(len(sh.idx) - 1)
	top := uint32(h >> 32)
	for i := top & mask; ; i = (i + 1) & mask {
		e := sh.idx[i]
		if e == 0 {
			return nil
		}
		if uint32(e>>32) == top {
			if k := sh.at(uint32(e) - 1); k.is(key) {
				return k
			}
		}
	}
}

// peek returns the index entry at the home position of hash h (0 if none):
// a load that brings it into the cache (see Aggregator.warmLocked).
func (sh *shard) peek(h uint64) uint64 {
	if len(sh.idx) == 0 {
		return 0
	}
	return sh.idx[uint32(h>>32)&uint32(len(sh.idx)-1)]
}

// is reports whether k's key is key. A key of up to 16 bytes is all in
// k.kp: comparing it there spares a cache miss on the key's own bytes,
// which live elsewhere on the heap.
func (k *keyState) is(key string) bool {
	if len(k.key) != len(key) {
		return false
	}
	if len(key) <= prefixLen {
		return k.kp == keyPrefix(key)
	}
	return k.key == key
}

// put indexes k, of hash h, which get does not find.
func (sh *shard) put(h uint64, k *keyState) {
	if 2*(sh.count+1) > len(sh.idx) {
		sh.grow()
	}
	k.kp, k.hash = keyPrefix(k.key), uint32(h>>32)
	sh.idx.insert(uint64(k.hash)<<32 | uint64(k.slot+1))
	sh.count++
}

// grow doubles the index (or makes its first).
func (sh *shard) grow() {
	old := sh.idx
	sh.idx = make(hashIndex, max(2*len(old), idxMinLen))
	for _, e := range old {
		if e != 0 {
			sh.idx.insert(e)
		}
	}
}

// del removes k from the index.
func (sh *shard) del(k *keyState) {
	sh.idx.remove(uint64(k.hash)<<32 | uint64(k.slot+1))
	sh.count--
}

// hashIndex is an open-addressing table probed linearly from an entry's
// home position, the low bits of its top 32 bits (a hash); its low 32 bits
// are the indexed number plus one, and 0 is an empty slot. Its length is a
// power of two and the owner keeps it at most half full. A removal shifts
// the entries after it back instead of leaving a tombstone, so probes stay
// short however many entries come and go. Lookups compare what the number
// points to, so they belong to the owner (shard.get, liveSketch.find).
type hashIndex []uint64

// insert adds entry e, for which there is room.
func (t hashIndex) insert(e uint64) {
	mask := uint32(len(t) - 1)
	i := uint32(e>>32) & mask
	for t[i] != 0 {
		i = (i + 1) & mask
	}
	t[i] = e
}

// remove removes entry e, which is in the table.
func (t hashIndex) remove(e uint64) {
	mask := uint32(len(t) - 1)
	i := uint32(e>>32) & mask
	for t[i] != e {
		i = (i + 1) & mask
	}
	// Shift back each following entry of the run that may sit at i (its
	// home position is not between i and it), so that no probe meets a
	// hole before the entry it looks for.
	for j := (i + 1) & mask; t[j] != 0; j = (j + 1) & mask {
		if home := uint32(t[j]>>32) & mask; (i-home)&mask < (j-home)&mask {
			t[i] = t[j]
			i = j
		}
	}
	t[i] = 0
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
		k = sh.at(uint32(sh.n))
		k.slot = uint32(sh.n)
		sh.n++
	}
	k.used = true
	return k
}

// release zeroes k's slot (dropping what it references, but for a small
// ring buffer) and frees it. Pointers to k held elsewhere (stale expiry heap
// entries) then see a key that is not held, or a later key in the same slot,
// and check its state rather than its identity (see expiryItem.live).
func (sh *shard) release(k *keyState) {
	// A stream of distinct keys evicts a key for every one it adds, and the
	// new key's first events would allocate a ring buffer (two, as it grows)
	// the size of the one evicted: it takes that one instead. Only a small
	// one, so that slots do not each keep a busy key's buffer.
	var recent []byte
	if cap(k.recent) <= reusedRingCap {
		recent = k.recent[:0]
	}
	*k = keyState{next: sh.free, slot: k.slot, recent: recent}
	sh.free = k
}

// reusedRingCap bounds the ring buffer a freed slot keeps: a few records.
const reusedRingCap = 128

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

// maxShards bounds the shards of a keyTable.
const maxShards = 64

// keyTable is the sharded map of tracked keys.
type keyTable struct {
	seed   maphash.Seed
	shards []shard
	mask   uint64
}

func newKeyTable(maxKeys, maxBytes int) *keyTable {
	// Enough keys per shard that per-shard LRU approximates a global one,
	// few enough that a reader's pass over one shard is short.
	n := 1
	for n < maxShards && maxKeys/(n*2) >= 1024 {
		n *= 2
	}
	t := &keyTable{seed: maphash.MakeSeed(), shards: make([]shard, n), mask: uint64(n - 1)}
	for i := range t.shards {
		s := &t.shards[i]
		s.held.init()
		s.idle.init()
		s.cap = maxKeys / n
		if i < maxKeys%n {
			s.cap++
		}
		s.maxBytes = maxBytes / n
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
	sh.bytes += k.cost()
	return k
}

// evictLocked stops tracking k, to make room for a new key in its shard:
// the caller counts the key it adds in its place.
func (a *Aggregator) evictLocked(sh *shard, k *keyState) {
	sh.bytes -= k.cost() // as charged: deciding its pending holds changes it
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

// chargeLocked counts the change of k's cost since it was before, and
// evicts the shard's least recently active keys (idle ones first, never k)
// while the shard costs more than its share of Config.MaxBytes.
func (a *Aggregator) chargeLocked(sh *shard, k *keyState, before int) {
	sh.bytes += k.cost() - before
	for sh.bytes > sh.maxBytes {
		v := sh.idle.back()
		if v == nil || v == k {
			v = sh.held.back()
		}
		if v == nil || v == k {
			return
		}
		a.evictLocked(sh, v)
		a.tracked.Add(-1)
	}
}

// cost is what k keeps beyond its slot, counted against Config.MaxBytes:
// its strings, its ring buffer, its distributions and its pending holds.
// An owner may be shared with other keys (interned): counted for each.
func (k *keyState) cost() int {
	n := len(k.key) + len(k.owner) + len(k.lease) + cap(k.recent)
	if k.stats != nil {
		n += int(unsafe.Sizeof(keyStats{}))
	}
	for p := k.pend; p != nil; p = p.next {
		n += int(unsafe.Sizeof(pendingHold{})) + len(p.lease) + len(p.owner)
	}
	return n
}

package state

import (
	"time"

	"github.com/lockscope/lockscope/event"
)

// Expiry: holds whose TTL lapsed while held, declared by the first of an
// expired event, a keyspace notification, a lost event past the TTL, or
// the grace passing by the event clock (Tick).

// expiryHeap orders holds by expiry so Tick finds the lapsed ones without
// scanning every held key. Renewals push a new entry and leave the old one
// in place; a popped entry that no longer matches its key's hold is stale
// and skipped. The heap is rebuilt from the held keys when stale entries
// outnumber live ones, which bounds its size.
type expiryHeap []expiryItem

type expiryItem struct {
	at int64
	k  *keyState
}

// live reports whether it still describes the current hold of the key in
// its slot. An evicted key's slot is zeroed (not held); if another key has
// since taken the slot with a hold expiring at the very same instant, the
// entry serves that hold as well as the hold's own entry would.
func (it expiryItem) live() bool {
	return it.k.held && it.k.expiresAt == it.at
}

func (h *expiryHeap) push(at int64, k *keyState) {
	*h = append(*h, expiryItem{at, k})
	s := *h
	for j := len(s) - 1; j > 0; {
		p := (j - 1) / 2
		if s[p].at <= s[j].at {
			break
		}
		s[p], s[j] = s[j], s[p]
		j = p
	}
}

func (h *expiryHeap) pop() expiryItem {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = expiryItem{}
	s = s[:n]
	*h = s
	h.down(0)
	return top
}

func (h expiryHeap) down(j int) {
	n := len(h)
	for {
		l := 2*j + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h[r].at < h[l].at {
			m = r
		}
		if h[j].at <= h[m].at {
			return
		}
		h[j], h[m] = h[m], h[j]
		j = m
	}
}

// compact drops stale entries and restores the heap order.
func (h *expiryHeap) compact() {
	s := (*h)[:0]
	for _, it := range *h {
		if it.live() {
			s = append(s, it)
		}
	}
	clear((*h)[len(s):])
	*h = s
	for j := len(s)/2 - 1; j >= 0; j-- {
		s.down(j)
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
	if outer != nil && outerKey == k && outer.typ == event.Expired {
		// An expired event that names this hold is the expiry's record:
		// one line in the key's timeline, not the expiry and the event.
		outer.d = int64(hold)
		a.endHoldLocked(sh, k, endExpired, at, hold)
		return
	}
	if outer != nil && outerKey == k && outer.obs != 0 && k.stats == nil {
		// The expiry's record goes into the ring before the event's own:
		// should it push an observation out, the event's must be counted.
		a.materializeLocked(k)
	}
	r := &a.recBufs[1]
	*r = record{ts: at, typ: event.Expired, owner: a.internLocked(k.owner), lease: ref{s: k.lease}, d: int64(hold),
		reason: a.internLocked(reason), trace: k.trace}
	a.rec, a.recKey = r, k
	a.endHoldLocked(sh, k, endExpired, at, hold)
	a.pushLocked(k, r)
	a.rec, a.recKey = outer, outerKey
}

// countExpirationLocked counts an expiration and returns its sequence in
// the expirations ring.
func (a *Aggregator) countExpirationLocked(k *keyState, owner, lease string, at int64, hold time.Duration, confirmed bool) uint64 {
	k.class.m.Expirations.Inc()
	k.class.win.expired(a.cur.step)
	a.cur.expirations++
	k.expSeq = a.exps.add(Expiration{Key: k.key, Class: k.class.name, Owner: owner, Lease: lease,
		At: time.Unix(0, at), Held: hold, Confirmed: confirmed, Passive: k.passive})
	if !a.byLoss {
		// The incident's time is the TTL's end where the events give it:
		// a keyspace notification's arrival differs between replicas.
		iat := at
		if k.held && k.lease == lease && k.expiresAt > 0 && k.expiresAt < at {
			iat = k.expiresAt
		}
		a.silentExpiryLocked(k.key, owner, lease, iat, k.ttl, k.expSeq, k.passive)
	}
	return k.expSeq
}

// holderWorkingLocked records that the holder of the expiration seq was
// still at work after it: two holders may have run at once.
func (a *Aggregator) holderWorkingLocked(seq uint64) {
	if a.exps.holderWorking(seq) {
		a.cur.expiredWorking++
	}
	a.silent.spoke(seq)
}

// expiredEventLocked applies an expired event from an emitter or watcher.
// It reports whether the expiration was known already (declared at its TTL
// or by a keyspace notification), so its record is in the timeline.
func (a *Aggregator) expiredEventLocked(sh *shard, k *keyState, lease, owner string, ts int64, hold time.Duration, passive bool, tr event.TraceID) (known bool) {
	switch {
	case k.matches(lease, owner):
		if !k.trace.IsValid() {
			k.trace = tr
		}
		if hold == 0 {
			hold = time.Duration(ts - k.since)
		}
		a.expireLocked(sh, k, ts, hold, passive, "")
	case k.prevOf(lease, owner) != nil:
		if p := k.prevOf(lease, owner); p.ended {
			if passive {
				a.exps.confirm(p.seq)
			}
			return true // still waiting for its holder's word
		}
		a.resolvePendingLocked(k, k.prevOf(lease, owner), true, passive)
	case k.endedAlready(lease, owner):
		if k.ended == endExpired {
			if passive {
				a.exps.confirm(k.expSeq)
			}
			return true
		}
	case lease != "" || k.lease == "":
		// A hold we never tracked: count it, once.
		a.countExpirationLocked(k, owner, lease, ts, hold, passive)
		a.holdLocked(k, hold, tr)
	}
	return false
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
	before := k.cost()
	defer func() { sh.bytes += k.cost() - before }() // before sh.mu's deferred unlock
	clock := a.eventClock(now)
	// Of the pending holds still undecided, the one whose TTL lapsed last
	// before now; of those whose expiry is declared already, the latest.
	var exp, declared *pendingHold
	for p := k.pend; p != nil; p = p.next {
		switch {
		case p.ended:
			if p.seq != 0 && (declared == nil || p.expires > declared.expires) {
				declared = p
			}
		case exp == nil || (p.expires <= clock && (exp.expires > clock || p.expires > exp.expires)):
			exp = p
		}
	}
	currentLapsed := k.held && k.expiresAt > 0 && clock >= k.expiresAt
	switch {
	case exp != nil && !currentLapsed:
		// A superseded (or late older) hold is the one that expired: the
		// current holder's acquisition was applied before this
		// notification arrived, and its own TTL has not lapsed yet.
		a.resolvePendingLocked(k, exp, true, true)
	case declared != nil && !currentLapsed:
		// The notification of an expiry declared before the current
		// holder's acquisition, arriving after it.
		a.exps.confirm(declared.seq)
	case k.held:
		a.expireLocked(sh, k, clock, time.Duration(clock-k.since), true, "keyspace")
	case k.ended == endExpired:
		a.exps.confirm(k.expSeq)
	}
}

// expireDueLocked declares expired the holds whose TTL lapsed more than
// ExpiryGrace before clock, and decides superseded holds the same way.
func (a *Aggregator) expireDueLocked(clock int64) {
	grace := int64(a.cfg.ExpiryGrace)
	for len(a.expiries) > 0 && clock-grace > a.expiries[0].at {
		it := a.expiries.pop()
		if !it.live() {
			continue
		}
		k := it.k
		sh, _ := a.keys.find(k.key)
		sh.mu.Lock()
		before := k.cost()
		a.expireLocked(sh, k, k.expiresAt, time.Duration(k.expiresAt-k.since), false, "ttl")
		sh.bytes += k.cost() - before // evicting waits for the shard's next event
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
	a.decideWatchesLocked(clock)
	a.decideSilentLocked(clock - grace)
	for i := 0; i < len(a.pendingKeys); {
		k := a.pendingKeys[i]
		sh, _ := a.keys.find(k.key)
		sh.mu.Lock()
		before := k.cost()
		for p := k.pend; p != nil; {
			next := p.next
			if clock-grace > p.expires {
				a.resolvePendingLocked(k, p, true, false) // the last removes k from pendingKeys
			}
			p = next
		}
		gone := k.pend == nil
		sh.bytes += k.cost() - before
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

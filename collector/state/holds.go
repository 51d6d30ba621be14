package state

import (
	"slices"
	"time"

	"github.com/lockscope/lockscope/event"
)

// The lifecycle of a key's holds: how an end event (release, loss, forced
// release) or a renewal finds the hold it refers to, and what happens to a
// hold another lease's acquisition supersedes before its end arrives: it
// waits among the key's pending holds until a late end event or the expiry
// grace decides it (see the Aggregator's "Expired while held").

// pendingHold is a hold superseded by another owner's acquisition that
// came after its expiry (or an older hold, arriving late, whose TTL ran out
// before the known hold began): expired while held unless its end event
// (from before its expiry) arrives late. A key keeps at most maxPending of
// them, linked through next.
//
// A pending hold may also be one whose end is recorded already (ended): a
// forced release, or an expiry, followed by another lease's acquisition.
// Its holder may still be at work and report, later, that it found its
// lock lost: that word must end nothing and count no second hold, and
// after an expiry it shows the holder was working (Expiration.HolderWorking).
// It waits for that word until one TTL past its expiry.
type pendingHold struct {
	lease, owner   string
	since, expires int64
	counted        bool   // its expiration (if any) and hold time are counted: revived before it was superseded (keyState.revived), or ended
	ended          bool   // its end is recorded: kept only to recognise its holder's late word
	seq            uint64 // its counted expiration in the expirations ring; 0: none
	next           *pendingHold
	// trace is the hold's, if known.
	trace event.TraceID
	fence int64 // the hold's fence (0: none), which a fence guard's refusal names it by
}

// maxPending bounds the pending holds of one key: parking one more decides
// the oldest as expired.
const maxPending = 8

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

// lostSlack is how early before the expiry we computed a holder may find its
// lock gone because its TTL lapsed: the expiry is computed from the
// renewal's event time, which is taken after Redis set the TTL (one round
// trip later). A tenth of the TTL, between 2 ms and 1 s.
func lostSlack(ttl time.Duration) int64 {
	return int64(min(max(ttl/10, 2*time.Millisecond), time.Second))
}

// endEventLocked applies a released, lost or forced event: it ends the hold
// it refers to, once. A lost event at or after the hold's expiry means the
// TTL lapsed while held under a holder still at work: it counts as such an
// expiration. tr is the event's trace: the hold's when the hold's own trace
// is not known.
func (a *Aggregator) endEventLocked(sh *shard, k *keyState, lease, owner string, ts int64, hold time.Duration, how uint8, tr event.TraceID) {
	switch p := k.prevOf(lease, owner); {
	case k.matches(lease, owner):
		if !k.trace.IsValid() {
			k.trace = tr
		}
		if hold == 0 {
			hold = time.Duration(ts - k.since)
		}
		if how == endLost && k.expiresAt > 0 && ts >= k.expiresAt-lostSlack(k.ttl) {
			a.expireLocked(sh, k, k.expiresAt, time.Duration(k.expiresAt-k.since), false, "lost")
			a.holderWorkingLocked(k.expSeq)
			return
		}
		a.endHoldLocked(sh, k, how, ts, hold)
	case p != nil && p.ended:
		// The late word of a holder whose hold was forced away or expired
		// and has a successor: its hold was counted when it ended.
		if how == endLost {
			a.holderWorkingLocked(p.seq)
		}
		a.resolvePendingLocked(k, p, false, false)
	case p != nil:
		if how == endLost && ts >= p.expires-lostSlack(time.Duration(p.expires-p.since)) {
			a.holderWorkingLocked(a.resolvePendingLocked(k, p, true, false))
			return
		}
		if hold == 0 {
			hold = time.Duration(max(ts-p.since, 0))
		}
		counted := p.counted
		if p.trace.IsValid() {
			tr = p.trace
		}
		a.resolvePendingLocked(k, p, false, false)
		if !counted {
			a.holdLocked(k, hold, tr)
		}
	case k.endedAlready(lease, owner):
		if how == endLost && k.ended == endExpired {
			a.holderWorkingLocked(k.expSeq)
		}
	default:
		// A hold we never saw begin (collector started mid-hold, or its
		// start was superseded): its own figure is all there is.
		a.holdLocked(k, hold, tr)
	}
}

// lateWordLocked applies what a holder says of a hold without ending one:
// a failed renewal, or a release that found the lock no longer its own
// (reason not_owner). Said after the hold's expiry, it shows the holder was
// still at work when its lock expired.
func (a *Aggregator) lateWordLocked(k *keyState, lease, owner string, ts int64, released bool) {
	switch p := k.prevOf(lease, owner); {
	case p != nil && p.ended:
		a.holderWorkingLocked(p.seq)
		if released {
			a.resolvePendingLocked(k, p, false, false) // its holder has nothing more to say
		}
	case p != nil && ts >= p.expires-lostSlack(time.Duration(p.expires-p.since)):
		a.holderWorkingLocked(a.resolvePendingLocked(k, p, true, false))
	case k.endedAlready(lease, owner) && k.ended == endExpired:
		a.holderWorkingLocked(k.expSeq)
	}
}

// keepEndedLocked keeps k's last hold, which ended by a forced release or
// an expiry, among its pending holds as another lease acquires k: until
// one TTL past its expiry its holder's late word (lost, a failed renewal, a
// not_owner release) is recognised as that hold's (see pendingHold).
func (a *Aggregator) keepEndedLocked(k *keyState) {
	if k.ended != endForced && k.ended != endExpired || k.ttl <= 0 || k.expiresAt == 0 {
		return // released or lost: its holder knows; without a TTL nothing renews
	}
	p := &pendingHold{lease: k.lease, owner: k.owner, since: k.since, expires: k.expiresAt + int64(k.ttl), counted: true, ended: true, trace: k.trace, fence: k.fence}
	if k.ended == endExpired {
		p.seq = k.expSeq
	}
	a.parkLocked(k, p)
}

// endHoldLocked ends k's current hold at ts.
func (a *Aggregator) endHoldLocked(sh *shard, k *keyState, how uint8, ts int64, hold time.Duration) {
	if end := k.since + int64(hold); k.wasStuck(end) {
		a.stuckIncidentLocked(k, end, endedByName(how))
	}
	k.held = false
	k.ended, k.endedAt = how, ts
	k.class.held--
	unlink(k)
	sh.idle.pushFront(k)
	if k.revived {
		k.revived = false // its hold time was observed when it was declared expired
		return
	}
	if k.ttl > 0 && !k.renewed() {
		k.class.win.bareHold(a.cur.step, hold, k.ttl)
	}
	a.holdLocked(k, hold, k.trace)
}

// supersedeLocked handles an acquisition by another lease while k is still
// held in our view: the old hold's end has not arrived (events from
// different emitters interleave) or never will. If the new acquisition came
// after the old hold's expiry, the old hold may have expired while held:
// it waits in the pending slot until its end event (released before expiry)
// or the expiry grace decides.
func (a *Aggregator) supersedeLocked(k *keyState, ts int64) {
	if k.wasStuck(ts) {
		a.stuckIncidentLocked(k, ts, EndedTakenOver)
	}
	k.held = false
	k.class.held--
	if k.expiresAt > 0 && ts >= k.expiresAt {
		p := &pendingHold{lease: k.lease, owner: k.owner, since: k.since, expires: k.expiresAt, counted: k.revived, trace: k.trace, fence: k.fence}
		if k.revived {
			p.seq = k.expSeq
		}
		a.parkLocked(k, p)
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

// renewed reports whether k's current (or last) hold was renewed: its
// expiry is no longer the one its acquisition set (a renewal sets it from
// its own time), which saves keyState a field.
func (k *keyState) renewed() bool {
	return k.ttl > 0 && k.expiresAt != after(k.since, k.ttl)
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
	if ttl > 0 && after(ts, ttl) <= k.since {
		a.parkLocked(k, &pendingHold{lease: lease, owner: owner, since: ts, expires: after(ts, ttl)})
	}
	return true
}

// resolvePendingLocked decides p, one of k's pending holds: expired, or
// ended by an event that arrived late. It returns the sequence of p's
// expiration in the expirations ring (0 if none was counted).
func (a *Aggregator) resolvePendingLocked(k *keyState, p *pendingHold, expired, confirmed bool) uint64 {
	at := &k.pend
	for *at != nil && *at != p {
		at = &(*at).next
	}
	if p == nil || *at == nil {
		return 0
	}
	*at = p.next
	p.next = nil
	seq := p.seq
	switch {
	case expired && !p.counted:
		seq = a.countExpirationLocked(k, p.owner, p.lease, p.expires, time.Duration(p.expires-p.since), confirmed)
		a.holdLocked(k, time.Duration(p.expires-p.since), p.trace)
	case expired && confirmed:
		a.exps.confirm(seq)
	}
	if k.pend == nil {
		if i := slices.Index(a.pendingKeys, k); i >= 0 {
			a.pendingKeys = slices.Delete(a.pendingKeys, i, i+1)
		}
	}
	if !expired {
		return 0
	}
	return seq
}

// renewedLocked applies a renewal: the hold's TTL and expiry move.
func (a *Aggregator) renewedLocked(sh *shard, k *keyState, lease, owner string, ts int64, ttl time.Duration, e *event.Event) {
	if e.Headroom > 0 {
		// Relative to the TTL the renewal extended: the hold's, before this
		// renewal sets its own.
		of := ttl
		if k.matches(lease, owner) && k.ttl > 0 {
			of = k.ttl
		}
		a.observeHeadroomLocked(k, e.Headroom, of)
		defer func() {
			if k.held && k.sameHold(lease, owner) {
				k.keepHeadroom(e.Headroom)
			}
		}()
	}
	setTTL := func() {
		k.ttl = ttl
		k.expiresAt = 0
		if ttl > 0 {
			k.expiresAt = after(ts, ttl)
			a.expiries.push(k.expiresAt, k)
		}
		k.degraded, k.passive = e.Degraded, e.Passive
	}
	switch {
	case k.matches(lease, owner):
		if !k.trace.IsValid() {
			k.trace = e.TraceID
		}
		setTTL()
	case k.prevOf(lease, owner) != nil:
		// A late renewal of a superseded hold. If it ran past the start of
		// the current hold, the old hold ended before that by an end event
		// still to come (or lost), not by expiry. A hold whose end is
		// recorded waits for its holder's word all the same.
		p := k.prevOf(lease, owner)
		if p.ended {
			break
		}
		if ttl <= 0 || after(ts, ttl) > k.since {
			a.resolvePendingLocked(k, p, false, false)
		} else {
			p.expires = after(ts, ttl)
		}
	case k.held:
		// Another lease holds the key in our view; a renewal cannot succeed
		// for two leases, so keep the holder we know.
	case k.endedAlready(lease, owner) && k.ended != endExpired && ts <= k.endedAt:
		// A renewal from before the hold's end, applied after it: a
		// duplicate entry.
	default:
		// Either the end we recorded was wrong or we never saw this hold
		// begin: held at least since now. A renewal succeeds only while
		// its lease holds the lock, so one timed after the hold's end
		// proves it still held: the expiry we declared was early, or the
		// released (lost, forced) event was not the holder's own. Events
		// are trusted input, and anyone who may XADD to the stream can
		// send one: without this a forged release would hide a live lock
		// until the next rescan. The counters keep what they counted;
		// an expired hold's expiration and hold time are not counted
		// again when the revived hold ends.
		resumed := k.endedAlready(lease, owner)
		k.revived = resumed && k.ended == endExpired
		k.held = true
		k.class.held++
		unlink(k)
		sh.held.pushFront(k)
		k.ended = endNone
		if !resumed {
			k.owner, k.lease, k.since, k.fence, k.trace = owner, lease, ts, e.Fence, e.TraceID
			k.headroomLast, k.headroomMin = 0, 0
		}
		setTTL()
	}
}

// observeHeadroomLocked counts a renewal's headroom: the TTL that was left
// of the lease (of TTL of) when the renewal landed, as the emitter measured
// it (the library: the conservative figure by its monotonic clock; the
// passive watcher: from the expiry it read before).
func (a *Aggregator) observeHeadroomLocked(k *keyState, headroom, of time.Duration) {
	c := k.class
	c.m.Headroom.Observe(headroom.Seconds())
	if of > 0 {
		c.m.HeadroomRatio.Observe(min(float64(headroom)/float64(of), 1))
		c.win.renewed(a.cur.step, headroom, of)
	}
}

// keepHeadroom records a renewal's headroom as the hold's last, and as its
// smallest if it is.
func (k *keyState) keepHeadroom(h time.Duration) {
	ms := int32(min(h.Milliseconds(), 1<<31-2)) + 1
	k.headroomLast = ms
	if k.headroomMin == 0 || ms < k.headroomMin {
		k.headroomMin = ms
	}
}

// headroomOf decodes keyState.headroomLast or headroomMin: 0 when unknown,
// else at least 1ns (less than a millisecond shows as 1ns).
func headroomOf(v int32) time.Duration {
	if v <= 1 {
		if v == 1 {
			return time.Nanosecond
		}
		return 0
	}
	return time.Duration(v-1) * time.Millisecond
}

package state

import (
	"math"
	"strings"
	"time"

	"github.com/lockscope/lockscope/event"
)

// Applying one event: the figures it counts (per class, per step, per
// key, hot keys) and the hold it begins, ends or renews (holds.go).

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
	return strings.Clone(lease)
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
			n := min(e.Count, maxDroppedReport)
			a.dropped = min(a.dropped, math.MaxInt64-n) + n
			if !a.muted {
				a.tot.Dropped.Add(float64(n))
			}
		}
		return
	}
	// The event's figures go to the step of its own time, as a live
	// replica's and a restarted one's do: an entry read late (a replica's
	// backlog after its replay, a lagging read, another emitter's late
	// flush) counts where it happened, not where it was read.
	if s := stepOf(ts); s < a.cur.step && s > a.cur.step-overviewSeriesLen {
		cur := a.cur
		a.cur = a.steps.at(s)
		defer func() { a.cur = cur }()
	}
	sh := a.keys.shardOf(h)
	sh.mu.Lock()
	k := a.keyLocked(sh, h, e.Key)
	before := k.cost()
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
	reason := e.Reason
	if e.Type == event.Acquired {
		reason = "" // the leases it held, unique per hold: the lock-order graph's (lockorder.go), not the intern table's
	}
	*r = record{ts: ts, typ: e.Type, owner: ownerRef, lease: ref{s: lease}, fence: e.Fence,
		reason: a.internLocked(reason), attempts: int32(min(e.Attempts, 1<<30)), trace: e.TraceID}
	a.rec, a.recKey = r, k
	if e.Degraded {
		r.flags |= recDegraded
	}
	if e.Passive {
		r.flags |= recPassive
	}
	wait := max(e.Wait, 0)
	hold := max(e.Hold, 0)
	known := false // the event's record is in k's ring already

	switch e.Type {
	case event.Waiting:
		a.waits.add(e, c.name, ts)
		r.who = a.internLocked(e.Holder)

	case event.Acquired:
		a.waits.end(e.Lease, ts, EndedAcquired)
		r.d = int64(wait)
		r.ttlMS = int32(min(e.TTL.Milliseconds(), 1<<31-1))
		contended := e.Attempts > 1
		c.m.Acquisitions.Inc()
		c.win.acquired(a.cur.step, e.Passive, e.TTL)
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
			a.waitLocked(k, wait, now, e.TraceID)
		}
		a.observe(k, obsAcq, now, 0)
		if e.Passive {
			a.hot.recordPassive(k.key, k.hash, c.name, contended, wait)
		} else {
			a.hot.record(k.key, k.hash, c.name, contended, wait, true)
		}
		if k.owner != "" && owner != k.owner {
			c.m.Handoffs.Inc()
		}
		if a.olderAcquisitionLocked(k, lease, owner, ts, e.TTL) {
			break
		}
		a.watchOverlapLocked(k, lease, owner, ts, e.Passive)
		a.passiveReturnLocked(k, owner, ts, e.Passive)
		if !k.held && !k.sameHold(lease, owner) {
			a.keepEndedLocked(k)
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
		k.owner, k.lease, k.since, k.ttl, k.fence, k.trace = owner, lease, ts, max(e.TTL, 0), e.Fence, e.TraceID
		k.headroomLast, k.headroomMin = 0, 0
		k.expiresAt = 0
		if k.ttl > 0 {
			k.expiresAt = after(ts, k.ttl)
			a.expiries.push(k.expiresAt, k)
		}
		k.degraded, k.passive, k.ended = e.Degraded, e.Passive, endNone
		if c.oldest == 0 || ts < c.oldest {
			c.oldest = ts
		}

	case event.Failed:
		a.waits.end(e.Lease, ts, failedHow(e.Reason))
		r.d = int64(wait)
		r.who = a.internLocked(e.Holder)
		reason := failureIndex(e.Reason)
		c.m.Failures[reason].Inc()
		c.win.failed(a.cur.step, reason, wait)
		k.failures++
		a.cur.failures++
		if reason == reasonHeld {
			a.contendedLocked(k)
			a.cur.refused++
		}
		a.waitLocked(k, wait, now, e.TraceID)
		a.hot.record(k.key, k.hash, c.name, reason == reasonHeld, wait, false)

	case event.Released:
		r.d = int64(hold)
		overlap := a.overlapEventLocked(k, e, lease, owner, ts)
		if e.Reason == event.ReasonNotOwner {
			a.spokeLocked(k.key, lease, owner, ts)
			c.m.Releases[1].Inc()
			// The holder released a lock that was no longer its own: its
			// lease lapsed or was taken while it worked.
			if !overlap {
				a.lostIncidentLocked(k, lease, owner, ts, event.Released.String(), "")
			}
			a.lateWordLocked(k, lease, owner, ts, true)
			break
		}
		c.m.Releases[0].Inc()
		a.endEventLocked(sh, k, lease, owner, ts, hold, endReleased, e.TraceID)

	case event.Lost:
		r.d = int64(hold)
		a.spokeLocked(k.key, lease, owner, ts)
		if !a.overlapEventLocked(k, e, lease, owner, ts) {
			a.lostIncidentLocked(k, lease, owner, ts, event.Lost.String(), e.Reason)
		}
		a.byLoss = true
		a.endEventLocked(sh, k, lease, owner, ts, hold, endLost, e.TraceID)
		a.byLoss = false

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
		a.forcedIncidentLocked(k.key, owner, r.who.s, r.reason.s, ts)
		a.waits.forced(k.key, ts)
		a.endEventLocked(sh, k, lease, owner, ts, hold, endForced, event.TraceID{}) // the operator's trace, not the hold's

	case event.Expired:
		r.d = int64(hold)
		// An expiration already in the timeline (declared at its TTL, or
		// by a keyspace notification) is not written there again.
		known = a.expiredEventLocked(sh, k, lease, owner, ts, hold, e.Passive, e.TraceID) && r.obs == 0

	case event.Renewed:
		r.d = int64(max(e.TTL, 0))
		r.headroom = int64(max(e.Headroom, 0))
		a.overlapEventLocked(k, e, lease, owner, ts)
		a.renewedLocked(sh, k, lease, owner, ts, max(e.TTL, 0), e)

	case event.RenewFailed:
		c.m.RenewalFailures.Inc()
		a.overlapEventLocked(k, e, lease, owner, ts)
		a.spokeLocked(k.key, lease, owner, ts)
		a.lateWordLocked(k, lease, owner, ts, false)

	case event.FenceRejected:
		// A resource refused a write with a stale fence: its writer still
		// worked under a lock it no longer held. A guard that knows only
		// the fence names the hold by it.
		if lease == "" && owner == "" {
			lease, owner = a.holdOfFenceLocked(k, e.Fence)
		}
		a.overlapEventLocked(k, e, lease, owner, ts)
		a.spokeLocked(k.key, lease, owner, ts)
		a.lateWordLocked(k, lease, owner, ts, false)

	case event.Requested:
		r.d, r.who = int64(wait), a.internLocked(e.By)
		r.attempts = int32(min(max(e.Count, 0), 1<<30)) // the listeners it reached
		a.requestedLocked(k, e, lease, owner, r.who.s, r.reason.s, ts)
	}
	if len(a.requests) > 0 {
		a.answerLocked(k, e, lease, ts)
	}
	a.orderLocked(e, c.name, k.key, owner, lease, ts)
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
	if !known {
		a.pushLocked(k, r)
	}
	a.rec, a.recKey = nil, nil
	a.chargeLocked(sh, k, before)
	sh.mu.Unlock()
}

// after returns ts+d, or the latest time there is when that overflows: a
// TTL of 292 years (the most a duration holds) from now does not wrap round
// to an expiry in the past.
func after(ts int64, d time.Duration) int64 {
	if d > 0 && ts > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return ts + int64(d)
}

func (a *Aggregator) contendedLocked(k *keyState) {
	k.class.m.Contentions.Inc()
	k.class.win.contended(a.cur.step)
	k.contentions++
	a.cur.contentions++
}

// waitLocked counts one wait, of the trace tr (zero: none).
func (a *Aggregator) waitLocked(k *keyState, wait time.Duration, now int64, tr event.TraceID) {
	c := k.class
	if tr.IsValid() {
		c.m.WaitTraced.ObserveTraced(wait.Seconds(), tr)
	} else {
		c.m.Wait.Observe(wait.Seconds())
	}
	a.cur.wait.add(wait)
	c.win.waited(a.cur.step, wait)
	k.waitTotal += int64(wait)
	a.observe(k, obsWait, now, wait)
}

// holdLocked counts one hold, of the trace tr (zero: none).
func (a *Aggregator) holdLocked(k *keyState, hold time.Duration, tr event.TraceID) {
	if tr.IsValid() {
		k.class.m.HoldTraced.ObserveTraced(hold.Seconds(), tr)
	} else {
		k.class.m.Hold.Observe(hold.Seconds())
	}
	a.cur.hold.add(hold)
	k.class.win.held(a.cur.step, hold)
	a.hot.recordHold(k.key, k.hash, k.class.name, hold)
	k.holdTotal += int64(hold)
	a.observe(k, obsHold, 0, hold)
}

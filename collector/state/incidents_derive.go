package state

import (
	"slices"
	"time"

	"github.com/lockscope/lockscope/event"
)

// Deriving incidents from what the state sees: where each kind opens and
// ends (see incidents.go for the kinds and how replicas agree).

// owners returns the owner as a list, none when unknown.
func ownersOf(owner string) []string {
	if owner == "" {
		return nil
	}
	return []string{owner}
}

// stuckIncidentLocked opens (end 0) or closes the stuck incident of k's
// current hold.
func (a *Aggregator) stuckIncidentLocked(k *keyState, end int64, endedBy string) {
	in := Incident{ID: incidentID(IncidentStuck, k.key, holdID(k.lease, k.owner, k.since)), Kind: IncidentStuck,
		Keys: []string{k.key}, Owners: ownersOf(k.owner), Start: time.Unix(0, k.since+int64(k.class.stuckAfter)), EndedBy: endedBy}
	if end > 0 {
		in.End = time.Unix(0, end)
	}
	a.incidentLocked(in, false)
}

// wasStuck reports whether k's current hold, ending at end, had passed its
// stuck threshold.
func (k *keyState) wasStuck(end int64) bool {
	return k.since > 0 && end-k.since > int64(k.class.stuckAfter)
}

// endedByName is how a hold that ended by how ended.
func endedByName(how uint8) string {
	switch how {
	case endReleased:
		return event.Released.String()
	case endLost:
		return event.Lost.String()
	case endExpired:
		return event.Expired.String()
	case endForced:
		return event.Forced.String()
	}
	return ""
}

// lostIncidentLocked records, for a lost event or a release that found the
// lock no longer the lease's (how), that a working holder lost its lease,
// unless it lost it to an operator's forced release (that incident tells)
// or stopped on purpose (max_hold). Called before the event ends the hold.
func (a *Aggregator) lostIncidentLocked(k *keyState, lease, owner string, ts int64, how, reason string) {
	if reason == event.ReasonMaxHold {
		return
	}
	var since, lapsed int64
	switch {
	case k.sameHold(lease, owner):
		if !k.held && k.ended == endForced {
			return
		}
		since, lapsed = k.since, k.expiresAt
	case k.prevOf(lease, owner) != nil:
		p := k.prevOf(lease, owner)
		since, lapsed = p.since, p.expires
	}
	a.leaseLostIncidentLocked(k.key, owner, lease, since, lapsed, ts, how, reason)
}

// leaseLostIncidentLocked records that a working holder (it sent a lost
// event, or a release that found the lock gone) lost its lease, which
// lapsed at lapsed (0: unknown) and which it learned of at ts.
func (a *Aggregator) leaseLostIncidentLocked(key, owner, lease string, since, lapsed, ts int64, endedBy, reason string) {
	start := ts
	if lapsed > 0 && lapsed < ts {
		start = lapsed
	}
	detail := "the holder found its lock gone or taken"
	if reason != "" && reason != event.ReasonNotOwner {
		detail += " (" + reason + ")"
	}
	a.incidentLocked(Incident{ID: incidentID(IncidentLeaseLost, key, holdID(lease, owner, since)), Kind: IncidentLeaseLost,
		Keys: []string{key}, Owners: ownersOf(owner), Start: time.Unix(0, start), End: time.Unix(0, ts), EndedBy: endedBy, Detail: detail}, false)
}

// expiredIncidentLocked records that key's hold by owner expired at at with
// its holder silent since. Of a watched lock (passive) that says only that
// the holder is unknown: its library tells us nothing.
func (a *Aggregator) expiredIncidentLocked(key, owner string, at int64, passive bool) {
	detail := "TTL lapsed while held; the holder said nothing after its lease's deadline: it died, hung or lost Redis"
	if passive {
		detail = "TTL lapsed while held; a watched lock: whether its holder worked on is unknown"
	}
	a.incidentLocked(Incident{ID: incidentID(IncidentHolderExpired, owner, bucketOf(at)), Kind: IncidentHolderExpired,
		Keys: []string{key}, Owners: ownersOf(owner), Start: time.Unix(0, at), End: time.Unix(0, at), EndedBy: event.Expired.String(),
		Detail: detail}, true)
}

// forcedIncidentLocked records an operator's forced release of key.
func (a *Aggregator) forcedIncidentLocked(key, owner, by, reason string, ts int64) {
	detail := "by " + by
	if reason != "" {
		detail += ": " + reason
	}
	a.incidentLocked(Incident{ID: incidentID(IncidentForced, owner, by, reason, bucketOf(ts)), Kind: IncidentForced,
		Keys: []string{key}, Owners: ownersOf(owner), Start: time.Unix(0, ts), End: time.Unix(0, ts), EndedBy: event.Forced.String(),
		Detail: detail}, true)
}

// deadlockIncidentLocked records cycle cy: open (end zero) or broken.
func (a *Aggregator) deadlockIncidentLocked(cy Cycle, end waitEnd) {
	leases := make([]string, 0, len(cy.Members))
	var keys, owners []string
	var formed time.Time
	for _, m := range cy.Members {
		leases = append(leases, m.Lease)
		if !slices.Contains(keys, m.WaitsFor) {
			keys = append(keys, m.WaitsFor)
		}
		if m.Owner != "" && !slices.Contains(owners, m.Owner) {
			owners = append(owners, m.Owner)
		}
		if m.Since.After(formed) {
			formed = m.Since
		}
	}
	slices.Sort(leases)
	in := Incident{ID: incidentID(IncidentDeadlock, leases...), Kind: IncidentDeadlock, Keys: keys, Owners: owners,
		Start: formed, EndedBy: end.how}
	if end.at > 0 {
		in.End = time.Unix(0, max(end.at, formed.UnixNano()))
	}
	a.incidentLocked(in, false)
}

// openQueue is a key's wait queue recorded as an open incident.
type openQueue struct {
	id     string
	start  int64
	owners []string // the holders its waiters waited for, as recorded
}

// queueIncidentsLocked opens an incident for each key where waitQueueMin
// or more callers wait and the longest has waited waitQueueAfter, and ends
// those whose queue fell under waitQueueMin. qs are the queues of
// waitQueueMin or more waiters now; clock is the event clock.
func (a *Aggregator) queueIncidentsLocked(qs []keyQueue, clock int64) {
	byKey := make(map[string]keyQueue, len(qs))
	for _, q := range qs {
		byKey[q.key] = q
	}
	for key, q := range a.queues {
		if _, ok := byKey[key]; !ok {
			a.queueIncidentLocked(key, q, clock)
			delete(a.queues, key)
		}
	}
	keys := make([]string, 0, len(byKey))
	for key, q := range byKey {
		if clock-q.since >= int64(waitQueueAfter) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		kq := byKey[key]
		hd := a.holderOf(key)
		holder, held := hd.owner, hd.held
		q, open := a.queues[key]
		switch {
		case !open:
			q = openQueue{id: incidentID(IncidentWaitQueue, key, kq.first),
				start: max(kq.since+int64(waitQueueAfter), kq.minthAt)}
		case !held || slices.Contains(q.owners, holder):
			continue // recorded already
		}
		if held && holder != "" && !slices.Contains(q.owners, holder) {
			q.owners = append(q.owners, holder)
		}
		if a.queues == nil {
			a.queues = make(map[string]openQueue)
		}
		a.queues[key] = q
		a.queueIncidentLocked(key, q, 0)
	}
}

// queueIncidentLocked records key's queue q: open (end 0) or drained.
func (a *Aggregator) queueIncidentLocked(key string, q openQueue, end int64) {
	in := Incident{ID: q.id, Kind: IncidentWaitQueue, Keys: []string{key}, Owners: slices.Clone(q.owners),
		Start: time.Unix(0, q.start), Detail: "callers queued for the key"}
	if end > 0 {
		in.End, in.EndedBy = time.Unix(0, max(end, q.start)), EndedDrained
	}
	a.incidentLocked(in, false)
}

package state

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/lockscope/lockscope/event"
)

// Overlaps: two holders at once, the failure a lock exists to prevent.
//
// The rule: a lease that acquires a key while the key's previous holder
// still believes it holds it makes an overlap — the previous holder spoke of
// its hold after the acquisition (it found the lock lost, a renewal failed,
// its release found the lock gone, a fence guard refused its write), or,
// when the key vanished or was forced away from under it, its own TTL still
// ran; the overlap lasts from the acquisition to that holder's last word
// (its TTL's end when it said nothing).
//
// The cause is how the key left the first holder: expired (its TTL lapsed
// while it worked on), vanished (the key disappeared with no release, expiry
// or forced release before the acquisition: a failover that lost the write,
// another client's DEL) or forced (an operator released it). A clean
// hand-off is never one: the first holder's release, or a renewal that
// succeeded, proves it held the lock until then, whatever order the events
// arrive in. Nor is a renewal racing the expiry it was to prevent: after an
// expiry, a word within lostSlack of the acquisition is the race, not work.
//
// Each superseded hold of a library lock with a TTL is watched (an
// overlapWatch) from the acquisition until one TTL past its own deadline,
// by the event clock: its holder's words arrive within that time or not at
// all. Watched locks (passive) have no words: their holder cannot tell us
// that it worked on, so they are never watched. The watches are bounded:
// maxWatchesPerKey per key, maxWatches in all; one more decides the oldest.

// Overlap causes, in the order of ClassMetrics.Overlaps.
const (
	CauseExpired  = "expired"  // the TTL lapsed under a holder that worked on
	CauseVanished = "vanished" // the key disappeared without a release, expiry or forced release
	CauseForced   = "forced"   // an operator released it while the holder worked
)

// OverlapCauses are the causes overlaps are counted under.
var OverlapCauses = [...]string{CauseExpired, CauseVanished, CauseForced}

const (
	causeExpired = iota
	causeVanished
	causeForced
)

// Overlap watch bounds.
const (
	maxWatchesPerKey = 4
	maxWatches       = 4096
)

// EndedDeadline is how an overlap ends whose first holder said nothing
// after the acquisition: its lease's own deadline, the TTL it last set.
const EndedDeadline = "deadline"

// overlapWatch is a superseded hold that may still believe it holds its
// key, and the acquisition that superseded it.
type overlapWatch struct {
	key   string
	class *classState

	lease, owner    string // the first holder
	fence           int64
	deadline        int64 // its TTL's end, event clock
	ttl             time.Duration
	next, nextOwner string // the second holder's lease and owner
	start           int64  // the second holder's acquisition
	cause           uint8
	until           int64 // decided (by the event clock, after the expiry grace) at this time

	end       int64  // the first holder's last word in the window; 0: none yet
	endedBy   string // that word's type ("lost", "released", ...)
	renewals  int    // renewal attempts refused or failed in the window
	fenced    int    // writes refused by fencing in the window
	counted   bool   // reported: counted, and its incident recorded
	sinceHeld int64  // the first hold's start, for its incident's id
	knew      bool   // its holder said it stopped before the acquisition: only a refused fenced write tells it worked on
	done      bool   // decided (see watchOrder)
}

// watchOverlapLocked starts watching k's current (or last) hold as an
// acquisition by lease/owner at ts supersedes it. Called before the
// acquisition changes k.
func (a *Aggregator) watchOverlapLocked(k *keyState, lease, owner string, ts int64, passive bool) {
	if k.since == 0 || k.sameHold(lease, owner) || passive || k.passive || k.expiresAt == 0 || k.ttl <= 0 || ts < k.since {
		return
	}
	var cause uint8
	knew := false
	switch {
	case k.held && ts >= k.expiresAt-lostSlack(k.ttl):
		cause = causeExpired
	case k.held:
		cause = causeVanished
	case k.ended == endExpired:
		cause = causeExpired
	case k.ended == endForced:
		cause = causeForced
	case k.ended == endLost && k.endedAt > ts:
		// Its holder's lost event came first, timed after this acquisition:
		// events of different emitters interleave.
		cause = causeVanished
		if ts >= k.expiresAt-lostSlack(k.ttl) {
			cause = causeExpired
		}
	case k.fence > 0 && (k.ended == endLost || k.ended == endReleased):
		// Its holder knew it no longer held the lock; its code may not
		// have asked, and writes on: only a fence guard's refusal of its
		// fence, after this acquisition, tells.
		knew, cause = true, causeVanished
		if ts >= k.expiresAt-lostSlack(k.ttl) {
			cause = causeExpired
		}
	default:
		return // released, or lost before, unfenced: its holder knew, and nothing would tell
	}
	w := &overlapWatch{key: k.key, class: k.class, lease: k.lease, owner: k.owner, fence: k.fence, deadline: k.expiresAt,
		ttl: k.ttl, next: lease, nextOwner: owner, start: ts, cause: cause, until: after(k.expiresAt, k.ttl), sinceHeld: k.since,
		knew: knew}
	if a.watches == nil {
		a.watches = make(map[string][]*overlapWatch)
	}
	ws := a.watches[k.key]
	if len(ws) >= maxWatchesPerKey {
		a.decideWatchLocked(ws[0])
		ws = a.watches[k.key]
	}
	if a.nWatches >= maxWatches {
		a.decideOldestWatchLocked()
		ws = a.watches[k.key]
	}
	a.watches[k.key] = append(ws, w)
	a.nWatches++
	a.watchOrder = append(a.watchOrder, w)
	if !knew && !k.held && k.ended == endLost {
		a.overlapWordLocked(w, event.Lost, "", min(k.endedAt, k.expiresAt))
	}
}

// watchOf returns the watch of k's hold named by lease/owner (or, for a
// fence guard's refusal naming neither, by its fence), or nil.
func (a *Aggregator) watchOf(key, lease, owner string, fence int64) *overlapWatch {
	for _, w := range a.watches[key] {
		switch {
		case lease != "" && w.lease != "":
			if lease == w.lease {
				return w
			}
		case owner != "":
			if owner == w.owner {
				return w
			}
		case fence > 0 && fence == w.fence:
			return w
		}
	}
	return nil
}

// overlapEventLocked applies what an event of a watched hold says; it
// reports whether the event is a word of an overlap (its lease_lost
// fragment folds into the overlap's story).
func (a *Aggregator) overlapEventLocked(k *keyState, e *event.Event, lease, owner string, ts int64) bool {
	if len(a.watches) == 0 {
		return false
	}
	w := a.watchOf(k.key, lease, owner, e.Fence)
	if w == nil {
		return false
	}
	switch e.Type {
	case event.Renewed:
		// A renewal succeeds only while its lease holds the lock: the
		// acquisition came after it (the emitters' clocks differ).
		if !w.counted {
			a.dropWatchLocked(w)
		}
		return false
	case event.Released:
		if e.Reason != event.ReasonNotOwner {
			if !w.counted {
				a.dropWatchLocked(w) // it held the lock until its release: a clean hand-off
			} else {
				a.finishWatchLocked(w)
			}
			return false
		}
	case event.Lost, event.RenewFailed, event.FenceRejected:
	default:
		return false
	}
	w2 := ts
	if e.Type == event.Lost && (e.Reason == event.ReasonError || e.Reason == "") {
		// Its renewals failed until its own deadline passed: it stopped
		// believing then, whenever its event says it noticed.
		w2 = min(ts, w.deadline)
	}
	word := a.overlapWordLocked(w, e.Type, e.Reason, w2)
	if e.Type == event.Released {
		a.finishWatchLocked(w) // its holder has nothing more to say
	}
	return word
}

// overlapWordLocked applies a word of w's first holder (typ, reason) timed
// at ts; it reports whether the word falls in the overlap.
func (a *Aggregator) overlapWordLocked(w *overlapWatch, typ event.Type, reason string, ts int64) bool {
	if w.knew && typ != event.FenceRejected {
		return false
	}
	race := int64(0)
	if w.cause == causeExpired {
		race = lostSlack(w.ttl)
	}
	if ts <= w.start+race {
		return false // before the acquisition, or the renewal that raced the expiry
	}
	switch {
	case typ == event.FenceRejected:
		w.fenced++
	case typ == event.RenewFailed, typ == event.Lost && reason == event.ReasonNotOwner:
		w.renewals++
	}
	if ts >= w.end {
		w.end, w.endedBy = ts, typ.String()
	}
	a.reportOverlapLocked(w)
	return true
}

// reportOverlapLocked counts w once and records (again) its incident.
func (a *Aggregator) reportOverlapLocked(w *overlapWatch) {
	if !w.counted {
		w.counted = true
		w.class.m.Overlaps[w.cause].Inc()
		a.cur.overlaps++
	}
	in := w.incident()
	a.recentOverlaps.put(in)
	a.incidentLocked(in, false)
}

// overlapRing keeps the most recent overlaps, for the key page's timeline.
type overlapRing struct {
	buf  [overlapsKept]Incident
	next int
}

// overlapsKept is how many recent overlaps Overlaps can return.
const overlapsKept = 64

// put adds in, or updates the record of its ID.
func (r *overlapRing) put(in Incident) {
	for i := range r.buf {
		if r.buf[i].ID == in.ID {
			r.buf[i] = in
			return
		}
	}
	r.buf[r.next%overlapsKept] = in
	r.next++
}

// Overlaps returns the recent overlaps of key (at most 64 are kept in
// all), newest first: what the key page draws on its timeline.
func (a *Aggregator) Overlaps(key string) []Incident {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Incident
	for i := range a.recentOverlaps.buf {
		if in := a.recentOverlaps.buf[i]; in.ID != "" && slices.Contains(in.Keys, key) {
			in.Keys, in.Owners, in.Leases = slices.Clone(in.Keys), slices.Clone(in.Owners), slices.Clone(in.Leases)
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(x, y Incident) int { return y.Start.Compare(x.Start) })
	return out
}

// finishWatchLocked ends w: its overlap's length is observed.
func (a *Aggregator) finishWatchLocked(w *overlapWatch) {
	if w.counted {
		w.class.m.OverlapSeconds.Observe(time.Duration(w.end - w.start).Seconds())
	}
	a.dropWatchLocked(w)
}

func (a *Aggregator) dropWatchLocked(w *overlapWatch) {
	w.done = true
	ws := a.watches[w.key]
	if i := slices.Index(ws, w); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
		a.nWatches--
	}
	if len(ws) == 0 {
		delete(a.watches, w.key)
	} else {
		a.watches[w.key] = ws
	}
}

// decideWatchLocked decides w now: a hold that vanished or was forced away
// while its TTL ran, whose holder said nothing, believed it held until its
// deadline; one that expired and said nothing died or hung: no overlap.
func (a *Aggregator) decideWatchLocked(w *overlapWatch) {
	if !w.counted && !w.knew && w.cause != causeExpired && w.deadline > w.start {
		w.end, w.endedBy = w.deadline, EndedDeadline
		a.reportOverlapLocked(w)
	}
	a.finishWatchLocked(w)
}

// decideOldestWatchLocked decides the watch that was made first. The
// order is kept with the decided ones left in place until they outnumber
// the rest: each call costs what it skips, once.
func (a *Aggregator) decideOldestWatchLocked() {
	for len(a.watchOrder) > 0 {
		w := a.watchOrder[0]
		a.watchOrder[0] = nil
		a.watchOrder = a.watchOrder[1:]
		if !w.done {
			a.decideWatchLocked(w)
			break
		}
	}
	if len(a.watchOrder) > 2*a.nWatches+64 {
		a.watchOrder = slices.DeleteFunc(a.watchOrder, func(w *overlapWatch) bool { return w.done })
	}
}

// decideWatchesLocked decides the watches whose time is up by clock.
func (a *Aggregator) decideWatchesLocked(clock int64) {
	if len(a.watches) == 0 {
		return
	}
	grace := int64(a.cfg.ExpiryGrace)
	var due []*overlapWatch
	for _, ws := range a.watches {
		for _, w := range ws {
			if clock-grace > w.until {
				due = append(due, w)
			}
		}
	}
	// In a fixed order: records and observations do not depend on the
	// map's.
	slices.SortFunc(due, func(x, y *overlapWatch) int { return cmp.Compare(x.start, y.start) })
	for _, w := range due {
		a.decideWatchLocked(w)
	}
}

// overlapDetail says what the cause means.
var overlapDetail = [...]string{
	causeExpired:  "the TTL lapsed under a holder that worked on",
	causeVanished: "the key disappeared without a release, expiry or forced release (a failover that lost the write, another client's DEL)",
	causeForced:   "an operator released it while the holder worked",
}

// incident is w's incident record. Its id is that of the first hold's story,
// the one its lease_lost fragment has: a record of either kind merges into
// the same incident, and the overlap's tells it (see Merge).
func (w *overlapWatch) incident() Incident {
	owners := ownersOf(w.owner)
	if w.nextOwner != "" && w.nextOwner != w.owner {
		owners = append(owners, w.nextOwner)
	}
	var leases []string
	for _, l := range []string{w.lease, w.next} {
		if l != "" {
			leases = append(leases, l)
		}
	}
	return Incident{ID: holdStoryID(w.key, w.lease, w.owner, w.sinceHeld), Kind: IncidentOverlap, Keys: []string{w.key},
		Owners: owners, Leases: leases, Start: time.Unix(0, w.start), End: time.Unix(0, w.end), EndedBy: w.endedBy,
		Cause: OverlapCauses[w.cause], Detail: overlapDetail[w.cause], RenewalsRefused: w.renewals, WritesRefused: w.fenced}
}

// holdStoryID is the incident id of one hold's loss: its lease_lost, or the
// overlap it became.
func holdStoryID(key, lease, owner string, since int64) string {
	return incidentID(IncidentLeaseLost, key, holdID(lease, owner, since))
}

// Fencing says what the fence guards saw of an overlap: stale writes
// refused, or none seen.
func Fencing(writesRefused int) string {
	switch writesRefused {
	case 0:
		return "no fencing seen: check what both holders wrote"
	case 1:
		return "fencing held: 1 stale write refused"
	}
	return "fencing held: " + strconv.Itoa(writesRefused) + " stale writes refused"
}

// holdOfFenceLocked returns the lease and owner of k's hold that was given
// fence: the current (or last) one, a superseded one, or a watched one.
func (a *Aggregator) holdOfFenceLocked(k *keyState, fence int64) (lease, owner string) {
	if fence <= 0 {
		return "", ""
	}
	if k.fence == fence {
		return k.lease, k.owner
	}
	for p := k.pend; p != nil; p = p.next {
		if p.fence == fence {
			return p.lease, p.owner
		}
	}
	if w := a.watchOf(k.key, "", "", fence); w != nil {
		return w.lease, w.owner
	}
	return "", ""
}

// passiveReturnLocked notes a watched lock's acquisition by the owner whose
// hold of it expired within one TTL before: that holder was alive after
// its lock expired, the one thing a watcher can learn of it.
func (a *Aggregator) passiveReturnLocked(k *keyState, owner string, ts int64, passive bool) {
	if passive && k.passive && !k.held && k.ended == endExpired && owner != "" && owner == k.owner && k.ttl > 0 &&
		ts <= after(k.endedAt, k.ttl) {
		a.holderWorkingLocked(k.expSeq)
	}
}

package state

import (
	"slices"
	"time"
)

// Silent holders: an expiration is a holder_expired incident (the holder
// died, hung or lost Redis) only once its holder has said nothing for one
// TTL past its lease's deadline, the time its late word (lost, a failed
// renewal, a not_owner release, a refused fenced write) takes to come. A
// holder that speaks tells the story instead: a lease_lost, or the overlap
// it became (overlap.go). One story per hold.

// silentExp is an expiration awaiting its holder's word.
type silentExp struct {
	key, owner string
	lease      string
	at         int64 // the expiry, event clock
	decide     int64 // when its holder's silence is established
	seq        uint64
	passive    bool
	spoke      bool
}

// maxSilent bounds the expirations awaiting their holder's word: one more
// decides the oldest at once.
const maxSilent = 4096

// silentExps are the expirations awaiting their holder's word, in the
// order they were declared.
type silentExps struct{ q []silentExp }

// spoke marks the expiration seq as one whose holder spoke.
func (s *silentExps) spoke(seq uint64) {
	if seq == 0 {
		return
	}
	for i := range s.q {
		if s.q[i].seq == seq {
			s.q[i].spoke = true
		}
	}
}

// silentExpiryLocked queues the expiration seq of key's hold by owner at
// at, of TTL ttl, for its verdict.
func (a *Aggregator) silentExpiryLocked(key, owner, lease string, at int64, ttl time.Duration, seq uint64, passive bool) {
	if len(a.silent.q) >= maxSilent {
		a.decideSilentOneLocked(0)
	}
	a.silent.q = append(a.silent.q, silentExp{key: key, owner: owner, lease: lease, at: at, decide: after(at, max(ttl, 0)),
		seq: seq, passive: passive})
}

// spokeLocked applies a word of key's hold by lease/owner at ts (lost, a
// failed renewal, a not_owner release, a refused fenced write): if that
// hold's expiration awaits its verdict, its holder was at work after it.
// The word may come after the hold's record left the key (a superseded
// hold decided by the grace): the queue still knows it.
func (a *Aggregator) spokeLocked(key, lease, owner string, ts int64) {
	for i := range a.silent.q {
		x := &a.silent.q[i]
		if x.key != key || ts < x.at {
			continue
		}
		if lease != "" && x.lease != "" && lease == x.lease || (lease == "" || x.lease == "") && owner != "" && owner == x.owner {
			if a.exps.holderWorking(x.seq) {
				a.cur.expiredWorking++
			}
			x.spoke = true
		}
	}
}

// decideSilentLocked records the holder_expired incidents of the
// expirations decided by upTo (the event clock less the expiry grace).
func (a *Aggregator) decideSilentLocked(upTo int64) {
	for i := 0; i < len(a.silent.q); {
		if a.silent.q[i].decide < upTo {
			a.decideSilentOneLocked(i)
			continue
		}
		i++
	}
}

// decideSilentOneLocked decides the i-th queued expiration.
func (a *Aggregator) decideSilentOneLocked(i int) {
	x := a.silent.q[i]
	a.silent.q = slices.Delete(a.silent.q, i, i+1)
	if !x.spoke {
		a.expiredIncidentLocked(x.key, x.owner, x.at, x.passive)
	}
}

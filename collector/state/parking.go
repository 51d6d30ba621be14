package state

import (
	"strings"
	"time"

	"github.com/lockscope/lockscope/event"
)

// Passive releases are parked for parkFor before they are applied. A forced
// release of another library's lock deletes the key: the keyspace watcher
// reports a release at once, and the forced event follows through the stream
// a moment later. Parked, the release gives way to that forced event (one
// forced release, not a release and a forced one); otherwise it is applied
// with its own time once parkFor has passed (Tick), or before any later
// event of its key.
const (
	parkFor   = 750 * time.Millisecond
	maxParked = 10_000
)

type parkedRelease struct {
	e   event.Event
	due int64 // unix ns by the aggregator's clock
}

// parkReleaseLocked parks a passive release; false means apply it now.
func (a *Aggregator) parkReleaseLocked(e *event.Event, now int64) bool {
	if a.replaying > 0 {
		return false
	}
	if a.forcedAlreadyLocked(e.Key, e.Owner) {
		return true // the forced event came first: it is the whole story
	}
	if len(a.parked) >= maxParked {
		return false
	}
	if a.parked == nil {
		a.parked = make(map[string]parkedRelease)
	}
	p := *e
	p.Key, p.Owner = strings.Clone(e.Key), strings.Clone(e.Owner)
	// Parked for less than ExpiryGrace: a key deleted just before its
	// deadline is released before Tick could take it for an expiry.
	a.parked[p.Key] = parkedRelease{e: p, due: now + int64(min(parkFor, a.cfg.ExpiryGrace*3/4))}
	return true
}

// forcedAlreadyLocked reports whether key's last hold, by owner, ended with
// a forced release.
func (a *Aggregator) forcedAlreadyLocked(key, owner string) bool {
	sh, h := a.keys.find(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.get(h, key)
	return k != nil && !k.held && k.ended == endForced && k.owner == owner
}

// unparkForLocked settles the parked release of e's key before e: a forced
// release of the same holder replaces it, anything else follows it.
func (a *Aggregator) unparkForLocked(e *event.Event, now int64) {
	p, ok := a.parked[e.Key]
	if !ok {
		return
	}
	delete(a.parked, e.Key)
	if e.Type == event.Forced && e.Owner == p.e.Owner {
		return
	}
	a.applyLocked(&p.e, now)
}

// unparkDueLocked applies the parked releases whose time has come.
func (a *Aggregator) unparkDueLocked(now int64) {
	for key, p := range a.parked {
		if now >= p.due {
			delete(a.parked, key)
			a.applyLocked(&p.e, now)
		}
	}
}

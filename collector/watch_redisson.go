package collector

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/redisson"
)

// Redisson's waiters. A caller that finds a Redisson lock held waits where
// Redis shows it: a fair lock's caller in the lock's queue (its field, in
// order, with the time it gives up), any other caller subscribed to the
// lock's channel (PUBSUB NUMSUB counts the clients, not who they are). The
// watcher polls both for every Redisson lock it follows, every
// redissonPoll, and writes what changed as the library's own waits read:
//
//   - a new waiter is a waiting event (the holder it waits for, its
//     deadline: a fair waiter's timeout), with a lease of its own;
//   - a waiter the watcher saw wait that takes the lock gives its lease to
//     the acquired event, an acquisition that had to wait (contention);
//     which of a channel's anonymous subscribers took it is not known: the
//     one seen first is said to;
//   - a waiter gone without taking the lock gave up: a failed event,
//     reason timeout, after the time it was seen waiting.
const redissonPoll = time.Second

// redissonResay is how often a channel's subscriber, which has no deadline
// the watcher can see, is said to wait again (the same lease): the state
// keeps a waiter without a deadline for 5 minutes after it was last said,
// and a Redisson caller may wait for as long as the lock is held.
const redissonResay = time.Minute

// redissonWaiters is who waits for one Redisson lock, as last polled.
// Guarded by passiveWatcher.mu.
type redissonWaiters struct {
	queued map[string]*waiterSeen // a fair lock's queue, by field
	slots  []*waiterSeen          // the channel's subscribers, first seen first
	next   int                    // numbers the slots' leases
	fewer  int                    // polls in a row that counted fewer subscribers than slots
}

type waiterSeen struct {
	lease, owner string
	since, said  time.Time // when first seen, and last said to wait
}

// pollRedisson polls the waiters of the Redisson locks held until ctx ends.
func (w *passiveWatcher) pollRedisson(ctx context.Context) {
	every(ctx, redissonPoll, func() { w.pollWaiters(ctx) })
}

func (w *passiveWatcher) pollWaiters(ctx context.Context) {
	type target struct{ key, mode string }
	var targets []target
	w.mu.Lock()
	for k, h := range w.held {
		if h.redisson {
			targets = append(targets, target{k, h.mode})
		}
	}
	for k := range w.waiting {
		if w.held[k] == nil {
			targets = append(targets, target{k, ""})
		}
	}
	w.mu.Unlock()
	for _, t := range targets {
		ws, err := redisson.ReadWaiting(ctx, w.node.rdb, t.key, t.mode)
		if err != nil {
			return // the next poll, or the resync after a reconnect, catches up
		}
		w.mu.Lock()
		w.reconcileWaiters(t.key, ws, w.c.opt.Now())
		w.mu.Unlock()
	}
}

// reconcileWaiters compares key's waiters with the last poll's and emits
// the waits begun and given up. The caller holds w.mu.
func (w *passiveWatcher) reconcileWaiters(key string, ws redisson.Waiting, now time.Time) {
	rw := w.waiting[key]
	if rw == nil {
		rw = &redissonWaiters{queued: make(map[string]*waiterSeen)}
		w.waiting[key] = rw
	}
	holder := ""
	if h := w.held[key]; h != nil {
		holder = h.owner
	}
	present := make(map[string]bool, len(ws.Queue))
	for _, q := range ws.Queue {
		present[q.Field] = true
		if rw.queued[q.Field] != nil {
			continue
		}
		x := &waiterSeen{lease: waiterLease("q", key, q.Field), owner: q.Owner(), since: now}
		rw.queued[q.Field] = x
		var budget time.Duration
		if !q.Timeout.IsZero() {
			budget = max(q.Timeout.Sub(now), time.Millisecond)
		}
		w.emit(event.Event{Type: event.Waiting, Key: key, Owner: x.owner, Lease: x.lease, Holder: holder, Wait: budget, TS: now.UnixNano(), Passive: true})
	}
	for f, x := range rw.queued {
		if !present[f] {
			delete(rw.queued, f)
			w.gaveUp(key, x, holder, now)
		}
	}
	for n := int(ws.Subscribers); len(rw.slots) < n; {
		rw.next++
		x := &waiterSeen{lease: waiterLease("c", key, strconv.Itoa(rw.next)), owner: "redisson waiter", since: now, said: now}
		rw.slots = append(rw.slots, x)
		w.emit(event.Event{Type: event.Waiting, Key: key, Owner: x.owner, Lease: x.lease, Holder: holder, TS: now.UnixNano(), Passive: true})
	}
	for _, x := range rw.slots {
		if now.Sub(x.said) >= redissonResay {
			x.said = now
			w.emit(event.Event{Type: event.Waiting, Key: key, Owner: x.owner, Lease: x.lease, Holder: holder, TS: now.UnixNano(), Passive: true})
		}
	}
	// A client between two waits (node-redisson subscribes anew for each)
	// is missing from one poll: fewer subscribers count from the second
	// poll in a row that sees them.
	if n := int(ws.Subscribers); len(rw.slots) > n {
		if rw.fewer++; rw.fewer >= 2 {
			for len(rw.slots) > n {
				x := rw.slots[len(rw.slots)-1]
				rw.slots = rw.slots[:len(rw.slots)-1]
				w.gaveUp(key, x, holder, now)
			}
		}
	} else {
		rw.fewer = 0
	}
	if len(rw.queued) == 0 && len(rw.slots) == 0 && w.held[key] == nil {
		delete(w.waiting, key)
	}
}

// gaveUp ends a waiter that left without taking the lock.
func (w *passiveWatcher) gaveUp(key string, x *waiterSeen, holder string, now time.Time) {
	w.emit(event.Event{Type: event.Failed, Key: key, Owner: x.owner, Lease: x.lease, Holder: holder,
		Reason: event.ReasonTimeout, Wait: max(now.Sub(x.since), 0), Attempts: 2, TS: now.UnixNano(), Passive: true})
}

// waitEnded gives acquisition e of Redisson lock l the lease and wait of
// the waiter that took it, if the watcher saw it wait: the queued waiter
// holding it now, else the channel's subscriber seen first. The caller
// holds w.mu.
func (w *passiveWatcher) waitEnded(e *event.Event, l redisson.Lock, now time.Time) {
	rw := w.waiting[e.Key]
	if rw == nil {
		return
	}
	take := func(x *waiterSeen) {
		e.Lease, e.Wait, e.Attempts = x.lease, max(now.Sub(x.since), 0), 2
	}
	for _, h := range l.Holders {
		f := h.ClientID + ":" + h.Thread
		if x := rw.queued[f]; x != nil {
			delete(rw.queued, f)
			take(x)
			return
		}
	}
	if len(rw.slots) > 0 {
		take(rw.slots[0])
		rw.slots = rw.slots[1:]
	}
}

// waiterLease names a Redisson waiter's wait without showing its client
// id: the same for every watcher, so that a new one repeats the waiters'
// leases rather than inventing new waiters.
func waiterLease(kind, key, id string) string {
	sum := sha1.Sum([]byte(key + "\n" + id))
	return "redisson-" + kind + ":" + hex.EncodeToString(sum[:8])
}

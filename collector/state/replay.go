package state

import (
	"cmp"
	"slices"
	"time"

	"github.com/lockscope/lockscope/event"
)

// Replay: rebuilding the picture after a restart.
//
// A restarted collector reads back what the stream retains (and the holders
// of a checkpoint) before it reads new entries. Replayed events are applied
// by their own time, not the collector's: the hot-key windows, per-step
// series and per-key histories they land in are those they would have
// landed in had the collector kept running. Events the previous incarnation
// already counted are replayed muted: they rebuild the state (holders,
// windows, recent expirations and forced releases) without adding to
// Prometheus counters and histograms, which would otherwise count them
// twice across the counter reset of the restart.
//
// While a replay runs, Tick must not run (it would move the windows to the
// collector's clock): the Collector starts its ticker only after EndReplay.

// BeginReplay prepares the aggregator for Replay from start on. Called before
// anything else was applied, it moves the windows back to start so the
// replayed events fill them in order. Replays of several partitions may run
// at once: each calls BeginReplay and EndReplay, and the windows follow the
// collector's clock again after the last EndReplay.
func (a *Aggregator) BeginReplay(start time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.replaying++
	st := start.UnixNano()
	if now := a.nowNS(); st > now {
		st = now
	}
	if a.eventsTotal == 0 && st > 0 && (a.replayAt == 0 || st < a.replayAt) {
		a.hot = newHotKeys(st)
		a.cur = a.steps.at(stepOf(st))
		a.replayAt = st
	}
}

// replayChunk is how many replayed events are applied between two expiry
// decisions (see Replay).
const replayChunk = 64

// Replay applies events read back from the stream, each at its own time
// (clamped so that time never goes back, nor past the collector's clock).
// count false mutes the Prometheus counters and histograms: the events were
// counted before the restart.
func (a *Aggregator) Replay(evs []event.Event, count bool) {
	for len(evs) > 0 {
		chunk := evs[:min(len(evs), replayChunk)]
		evs = evs[len(chunk):]
		real := a.nowNS()
		a.mu.Lock()
		if !count {
			a.muteLocked(true)
		}
		hs := a.warmLocked(chunk)
		for i := range chunk {
			e, ok := a.clip(&chunk[i])
			if !ok {
				continue
			}
			now := min(max(e.TS, a.replayAt), real)
			a.replayAt = now
			a.advanceLocked(now)
			a.applyHashedLocked(e, hs[i], now)
		}
		// What Tick would have decided by now: expiries and parked holds
		// whose grace has passed. Without it a key's superseded holds
		// would pile up past maxPending during a long replay and their
		// expirations be lost.
		a.expireDueLocked(a.replayAt)
		a.muteLocked(false)
		a.lastEvent.Store(a.evMax)
		a.mu.Unlock()
	}
}

// EndReplay returns to live ingest: windows follow the collector's clock
// again from the next Apply or Tick. Holds whose TTL lapsed before
// countedBefore (when the previous incarnation stopped) were declared
// expired, and counted, by the previous incarnation: they are declared
// expired here, muted. Later ones are counted by the next Tick. So are
// deadlocks: those among the replayed waiters that had formed a scan before
// countedBefore were counted by the previous incarnation (see
// knownCyclesLocked).
func (a *Aggregator) EndReplay(countedBefore time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !countedBefore.IsZero() {
		a.muteLocked(true)
		// Keyspace notifications confirm an expiry at its TTL, without
		// the grace Tick waits for: the previous incarnation counted every
		// hold whose TTL lapsed before it stopped.
		a.expireDueLocked(countedBefore.UnixNano() + int64(a.cfg.ExpiryGrace))
		a.muteLocked(false)
		a.knownCyclesLocked(countedBefore.UnixNano() - int64(scanEvery))
		// Stuck holds too: the first scan does not count those stuck
		// before countedBefore (scanLocked).
		// A hold that became stuck in the last second before the stop may
		// not have been scanned by it: never counted twice, at worst once
		// not at all.
		a.stuckBefore = countedBefore.UnixNano()
	}
	a.replaying = max(a.replaying-1, 0)
}

// muteLocked switches the counters and histograms of every class to ones
// that count nowhere (muted) or back to the class's own.
func (a *Aggregator) muteLocked(muted bool) {
	if a.muted == muted {
		return
	}
	a.muted = muted
	for _, c := range a.classes {
		c.m = c.metricsFor(muted)
	}
}

func (c *classState) metricsFor(muted bool) ClassMetrics {
	if muted {
		return nopClass
	}
	return c.counted
}

// Holders returns the current holds that began before the given time, oldest
// first and at most max of them, as the acquired events that would recreate
// them: what a checkpoint keeps so that a restarted collector knows holders
// older than the stream it replays.
func (a *Aggregator) Holders(before time.Time, max int) []event.Event {
	limit := before.UnixNano()
	var out []event.Event
	for i := range a.keys.shards {
		sh := &a.keys.shards[i]
		sh.mu.Lock()
		sh.held.each(func(k *keyState) bool {
			if k.since < limit {
				out = append(out, event.Event{Type: event.Acquired, Key: k.key, Owner: k.owner, Lease: k.lease,
					TS: k.since, TTL: k.ttl, Fence: k.fence, Attempts: 1, Passive: k.passive, Degraded: k.degraded})
			}
			return true
		})
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(x, y event.Event) int { return cmp.Compare(x.TS, y.TS) })
	return out[:min(len(out), max)]
}

// PassiveHeld returns the holds seen by the passive watch (Passive) that
// are held now, at most max of them: what a collector that takes over the
// watch compares Redis with, so that a hold it finds keeps the since the
// stream gave it.
func (a *Aggregator) PassiveHeld(max int) []LockInfo {
	now, clock := a.clocks()
	var out []LockInfo
	for i := range a.keys.shards {
		sh := &a.keys.shards[i]
		sh.mu.Lock()
		sh.held.each(func(k *keyState) bool {
			if k.passive {
				out = append(out, infoLocked(k, now, clock, &a.waits))
			}
			return len(out) < max
		})
		sh.mu.Unlock()
		if len(out) >= max {
			break
		}
	}
	return out
}

// Passive reports whether key's current (or last) hold was seen by the
// passive watch: its expiry is the watcher's to report, through the stream.
func (a *Aggregator) Passive(key string) bool {
	sh, h := a.keys.find(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.get(h, key)
	return k != nil && k.passive
}

// ExpirationsBefore returns the kept expirations (at most 256) that
// happened before t, oldest first: what the checkpoint keeps of them, for a
// restarted replica whose replayed stream begins later.
func (a *Aggregator) ExpirationsBefore(t time.Time) []Expiration {
	all := a.Expirations(0)
	out := make([]Expiration, 0, len(all))
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].At.Before(t) {
			out = append(out, all[i])
		}
	}
	return out
}

// RestoreExpirations adds expirations that a restarted replica read from
// the checkpoint, oldest first, older than the stream it replays: to the
// recent expirations and the overview's counts (those of the last 5
// minutes), so that it shows what the replicas that kept running show. The
// keys' histories and the exported counters are left alone (the history is
// rebuilt from the replayed stream only; the counters were exported before
// the restart). Call it at start, before the replay.
func (a *Aggregator) RestoreExpirations(exps []Expiration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur := stepOf(a.nowNS())
	for _, e := range exps {
		if e.Class == "" {
			e.Class = a.classOfLocked(e.Key).name
		}
		a.exps.add(e)
		if s := stepOf(e.At.UnixNano()); s <= cur && s > cur-overviewSeriesLen {
			a.steps.at(s).expirations++
			if e.HolderWorking {
				a.steps.at(s).expiredWorking++
			}
		}
	}
}

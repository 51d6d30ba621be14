package state

import (
	"time"
)

// Tick: the periodic pass that decides expiries (expiry.go) and, once a
// second, finds stuck holds, the oldest hold of each class and deadlocks.

// Tick declares expired the holds whose TTL lapsed more than ExpiryGrace ago
// by the event clock, decides superseded holds whose grace has passed, and
// (at most once a second, the thresholds being minutes) refreshes the stuck
// and oldest-hold figures of every class and looks for deadlocks.
func (a *Aggregator) Tick() {
	now := a.nowNS()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.replaying > 0 {
		return // the windows follow the replayed events' time
	}
	a.advanceLocked(now)
	a.unparkDueLocked(now)
	a.lastEvent.Store(a.evMax)
	a.expireDueLocked(a.eventClock(now))
	if a.lastScan != 0 && now-a.lastScan < int64(scanEvery) && now >= a.lastScan {
		return
	}
	a.scanLocked(now, a.eventClock(now))
	a.scanWaitsLocked(a.eventClock(now))
	a.scanLockOrderLocked(a.eventClock(now))
	a.requestsDueLocked(a.eventClock(now))
}

// scanEvery is how often Tick scans every key (stuck and oldest holds) and
// the waiters (deadlocks).
const scanEvery = time.Second

// scanLocked refreshes the stuck and oldest-hold figures of every class.
func (a *Aggregator) scanLocked(now, clock int64) {
	a.lastScan = now
	for _, c := range a.classes {
		c.stuck, c.noExpiry, c.oldest = 0, 0, 0
	}
	for i := range a.keys.shards {
		sh := &a.keys.shards[i]
		sh.mu.Lock()
		sh.held.each(func(k *keyState) bool {
			c := k.class
			if clock-k.since > int64(c.stuckAfter) {
				c.stuck++
				if a.scanClock == 0 || a.scanClock-k.since <= int64(c.stuckAfter) {
					// Became stuck since the last scan. At the first scan
					// after a restart, a hold that was stuck before the
					// previous incarnation stopped was counted by it: its
					// incident is recorded (merged by id) but not counted
					// again.
					a.incMuted = a.scanClock == 0 && k.since+int64(c.stuckAfter) < a.stuckBefore
					a.stuckIncidentLocked(k, 0, "")
					a.incMuted = false
				}
			}
			if k.passive && k.ttl <= 0 && k.expiresAt == 0 {
				c.noExpiry++
			}
			if c.oldest == 0 || k.since < c.oldest {
				c.oldest = k.since
			}
			return true
		})
		sh.mu.Unlock()
	}
	a.scanClock = clock
}

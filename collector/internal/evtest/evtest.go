// Package evtest is test support for the collector's packages: lock events
// scripted at offsets from a fixed instant, a clock the tests move by hand,
// and the process's CPU time, which benchmarks report beside wall time.
package evtest

import (
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/lockscope/lockscope/event"
)

// T0 is a step-aligned instant scripted events start from.
var T0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is an injectable clock, at T0 until moved.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at T0.
func NewClock() *Clock { return &Clock{t: T0} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Ev builds an event at T0+at.
func Ev(typ event.Type, key, owner, lease string, at time.Duration) event.Event {
	return event.Event{Type: typ, Key: key, Owner: owner, Lease: lease, TS: T0.Add(at).UnixNano()}
}

// Acquired builds an acquisition.
func Acquired(key, owner, lease string, at, wait time.Duration, attempts int, ttl time.Duration) event.Event {
	e := Ev(event.Acquired, key, owner, lease, at)
	e.Wait, e.Attempts, e.TTL = wait, attempts, ttl
	return e
}

// Failed builds a failed obtain.
func Failed(key, owner string, at, wait time.Duration, attempts int, reason string) event.Event {
	e := Ev(event.Failed, key, owner, "", at)
	e.Wait, e.Attempts, e.Reason = wait, attempts, reason
	return e
}

// Ended builds the end of a hold (released, lost, expired, forced) or
// another event with a hold and a reason.
func Ended(typ event.Type, key, owner, lease string, at, hold time.Duration, reason string) event.Event {
	e := Ev(typ, key, owner, lease, at)
	e.Hold, e.Reason = hold, reason
	return e
}

// Renewed builds a renewal.
func Renewed(key, owner, lease string, at, ttl time.Duration) event.Event {
	e := Ev(event.Renewed, key, owner, lease, at)
	e.TTL = ttl
	return e
}

// Contend returns n acquisitions of key that each waited wait over 2
// attempts (contended), at T0+at.
func Contend(key string, n int, wait, at time.Duration) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		out[i] = Acquired(key, fmt.Sprintf("o%d", i), fmt.Sprintf("l%d", i), at, wait, 2, 0)
	}
	return out
}

// CPUTime returns the process's user+system CPU time. Benchmarks report CPU
// time per operation beside wall time: the machine they run on is shared,
// and wall time there measures the neighbours as much as the code.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Package extratest is the adapters' shared test support: a lock.Recorder
// that keeps what it is given.
package extratest

import (
	"sync"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
)

// Recorder keeps every event recorded, in order.
type Recorder struct {
	mu     sync.Mutex
	events []event.Event
}

var _ lock.Recorder = (*Recorder)(nil)

// Record keeps e.
func (r *Recorder) Record(e event.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns the events so far.
func (r *Recorder) Events() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event.Event(nil), r.events...)
}

// Step is what a test compares of an event: its type and who, the
// durations and times left out.
type Step struct {
	Type                              event.Type
	Key, Owner, Lease, Holder, Reason string
	Attempts                          int
}

// Steps returns the recorded events as Steps.
func (r *Recorder) Steps() []Step {
	var out []Step
	for _, e := range r.Events() {
		out = append(out, Step{e.Type, e.Key, e.Owner, e.Lease, e.Holder, e.Reason, e.Attempts})
	}
	return out
}

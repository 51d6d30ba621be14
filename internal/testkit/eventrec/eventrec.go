// Package eventrec is a lock.Recorder for tests that keeps every event it is
// given, in order, and reads them back.
package eventrec

import (
	"sync"

	"github.com/lockscope/lockscope/event"
)

// Recorder keeps every event recorded, in order. Its zero value is ready.
type Recorder struct {
	mu     sync.Mutex
	events []event.Event
}

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

// Of returns the events so far of type t.
func (r *Recorder) Of(t event.Type) []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Event
	for _, e := range r.events {
		if e.Type == t {
			out = append(out, e)
		}
	}
	return out
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

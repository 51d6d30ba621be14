package state

import "github.com/lockscope/lockscope/event"

// The state counts what it sees through Metrics, an interface it declares:
// it imports no metrics library (as go-redis keeps Prometheus out of its
// core behind a hook). The Prometheus export implements it. Every counter
// is resolved once, when the state starts or a class appears, so applying
// an event costs one interface call per figure and never a label lookup.

// Counter is a figure that only goes up. prometheus.Counter is one.
type Counter interface {
	Inc()
	Add(float64)
}

// Gauge is a figure set to its current value. prometheus.Gauge is one.
type Gauge interface {
	Set(float64)
}

// Observer takes observations of a distribution (in seconds).
// prometheus.Observer is one.
type Observer interface {
	Observe(float64)
}

// TracedObserver takes the observations of a distribution that belong to a
// trace (in Prometheus, with the trace id as an exemplar). An observation
// goes to the Observer or to the TracedObserver of its distribution, never
// to both; the state calls ObserveTraced only with a valid trace.
type TracedObserver interface {
	ObserveTraced(v float64, trace event.TraceID)
}

// Metrics receives the state's counts. Every field of what it returns
// must be set.
type Metrics interface {
	// Totals returns the figures of the whole state; called once, by New.
	Totals() Totals
	// Class returns the figures of one lock class; called once per class,
	// when the class first appears.
	Class(name string) ClassMetrics
}

// Totals are the state-wide figures.
type Totals struct {
	Events    [16]Counter                 // events applied, by event.Type
	Malformed Counter                     // stream entries that could not be decoded
	Dropped   Counter                     // events emitters reported dropped
	StreamGap Counter                     // stream entries trimmed before they were read
	Deadlocks Counter                     // cycles of the wait-for graph, each once when it appears
	Incidents [len(IncidentKinds)]Counter // incidents opened, by kind (in the order of IncidentKinds)
	Cut       [len(CutFields)]Counter     // event fields cut (a key: its event skipped), by CutFields
	Lag       Gauge                       // stream entries not yet delivered to the group
	Pending   Gauge                       // entries delivered, not yet acknowledged
}

// ClassMetrics are one lock class's figures.
type ClassMetrics struct {
	Acquisitions    Counter
	Contentions     Counter                       // acquisitions that waited, plus refused tries
	Failures        [len(FailureReasons)]Counter  // by FailureReasons
	Wait            Observer                      // wait of acquisitions and failed obtains
	Hold            Observer                      // hold time, once per hold
	WaitTraced      TracedObserver                // Wait's observations of traced calls
	HoldTraced      TracedObserver                // Hold's observations of traced holds
	Releases        [len(ReleaseOutcomes)]Counter // by ReleaseOutcomes
	Expirations     Counter
	RenewalFailures Counter
	Forced          Counter
	Handoffs        Counter
	Headroom        Observer // TTL left when a renewal landed (seconds)
	HeadroomRatio   Observer // the same, as a fraction of the TTL it renewed (0..1)

	ReleaseRequests [len(RequestOutcomes)]Counter // holds asked to release, by RequestOutcomes (requests.go)
	// Overlaps: two holders at once, by OverlapCauses (overlap.go);
	// OverlapSeconds: how long they overlapped, once per overlap.
	Overlaps       [len(OverlapCauses)]Counter
	OverlapSeconds Observer
}

// FailureReasons are the reasons a failed obtain is counted under, in the
// order of ClassMetrics.Failures; an unknown reason counts as error.
var FailureReasons = [...]string{event.ReasonTimeout, event.ReasonCanceled, event.ReasonError, event.ReasonHeld}

const (
	reasonTimeout = iota
	reasonCanceled
	reasonError
	reasonHeld
)

// ReleaseOutcomes are the outcomes a release is counted under, in the order
// of ClassMetrics.Releases: released, or not_owner when the lock had
// already passed to another owner.
var ReleaseOutcomes = [...]string{"released", event.ReasonNotOwner}

// failureIndex maps a Failed event's reason to its index in FailureReasons.
func failureIndex(reason string) int {
	switch reason {
	case event.ReasonTimeout:
		return reasonTimeout
	case event.ReasonCanceled:
		return reasonCanceled
	case event.ReasonHeld:
		return reasonHeld
	}
	return reasonError
}

// nop counts nowhere: the figures of a state without Metrics, and those a
// muted replay counts into (see Replay).
type nop struct{}

func (nop) Inc()            {}
func (nop) Add(float64)     {}
func (nop) Set(float64)     {}
func (nop) Observe(float64) {}

func (nop) ObserveTraced(float64, event.TraceID) {}

var (
	nopTotals = func() Totals {
		t := Totals{Malformed: nop{}, Dropped: nop{}, StreamGap: nop{}, Deadlocks: nop{}, Lag: nop{}, Pending: nop{}}
		for i := range t.Events {
			t.Events[i] = nop{}
		}
		for i := range t.Incidents {
			t.Incidents[i] = nop{}
		}
		for i := range t.Cut {
			t.Cut[i] = nop{}
		}
		return t
	}()
	nopClass = func() ClassMetrics {
		c := ClassMetrics{Acquisitions: nop{}, Contentions: nop{}, Wait: nop{}, Hold: nop{}, WaitTraced: nop{}, HoldTraced: nop{}, Expirations: nop{},
			RenewalFailures: nop{}, Forced: nop{}, Handoffs: nop{}, Headroom: nop{}, HeadroomRatio: nop{}}
		for i := range c.Failures {
			c.Failures[i] = nop{}
		}
		for i := range c.Releases {
			c.Releases[i] = nop{}
		}
		for i := range c.ReleaseRequests {
			c.ReleaseRequests[i] = nop{}
		}
		for i := range c.Overlaps {
			c.Overlaps[i] = nop{}
		}
		c.OverlapSeconds = nop{}
		return c
	}()
)

// nopMetrics is the Metrics of a state configured without.
type nopMetrics struct{}

func (nopMetrics) Totals() Totals            { return nopTotals }
func (nopMetrics) Class(string) ClassMetrics { return nopClass }

var _ Metrics = nopMetrics{}

package state

import (
	"slices"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// tid is a test trace id.
func tid(n byte) event.TraceID { return event.TraceID{0: 0x7e, 15: n} }

func withTrace(e event.Event, n byte) event.Event {
	e.TraceID, e.SpanID = tid(n), event.SpanID{7: n}
	return e
}

// The wait and hold of a traced call are observed with its trace (the
// export's exemplar); untraced ones without. The hold's trace is the
// trace of the call that obtained it, whatever its end event carries (an
// operator's forced release has the operator's), and a hold the collector
// declares expired is observed with it too.
func TestTracedObservations(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	tl := tallyOf(agg)
	ms := time.Millisecond
	forced := withTrace(ended(event.Forced, "svc:4", "w", "L4", 40*ms, 30*ms, "stuck"), 9)
	forced.By = "ops"
	agg.Apply([]event.Event{
		withTrace(acquired("svc:1", "w", "L1", 0, 5*ms, 2, time.Minute), 1),
		withTrace(ended(event.Released, "svc:1", "w", "L1", 20*ms, 20*ms, ""), 1),
		acquired("svc:2", "w", "L2", 0, 7*ms, 1, time.Minute), // untraced
		ended(event.Released, "svc:2", "w", "L2", 10*ms, 10*ms, ""),
		withTrace(failed("svc:3", "w", 12*ms, 3*ms, 4, event.ReasonTimeout), 3),
		withTrace(acquired("svc:4", "w", "L4", 10*ms, ms, 1, time.Minute), 4),
		forced,
		// A hold whose acquisition is untraced and whose release is
		// (another emitter's choice): the release's trace names it.
		acquired("svc:5", "w", "L5", 0, ms, 1, time.Minute),
		withTrace(ended(event.Released, "svc:5", "w", "L5", 50*ms, 50*ms, ""), 5),
		withTrace(acquired("svc:6", "w", "L6", 0, 2*ms, 1, time.Second), 6), // expires
	})
	clk.Add(time.Second + DefaultExpiryGrace + time.Second)
	agg.Tick()

	const class = "svc:*"
	if got, want := tl.tracedObs("wait", class), []traced{
		{(5 * ms).Seconds(), tid(1)}, {(3 * ms).Seconds(), tid(3)}, {ms.Seconds(), tid(4)}, {(2 * ms).Seconds(), tid(6)},
	}; !slices.Equal(got, want) {
		t.Errorf("traced wait observations = %v, want %v", got, want)
	}
	if got, want := tl.tracedObs("hold", class), []traced{
		{(20 * ms).Seconds(), tid(1)}, {(30 * ms).Seconds(), tid(4)}, {(50 * ms).Seconds(), tid(5)}, {time.Second.Seconds(), tid(6)},
	}; !slices.Equal(got, want) {
		t.Errorf("traced hold observations = %v, want %v", got, want)
	}
	// Every observation is counted once, traced or not.
	if n := tl.observed("wait", class); n != 6 {
		t.Errorf("wait observations = %d, want 6", n)
	}
	if n := tl.observed("hold", class); n != 5 {
		t.Errorf("hold observations = %d, want 5", n)
	}
	if li, _ := agg.Lock("svc:5"); li.Trace != tid(5) {
		t.Errorf("Lock(svc:5).Trace = %v, want the release's %v", li.Trace, tid(5))
	}
	d, _ := agg.Lock("svc:6")
	if d.Held || d.Trace != tid(6) {
		t.Fatalf("Lock(svc:6) held %v trace %v, want expired, trace %v", d.Held, d.Trace, tid(6))
	}
	if len(d.Recent) != 2 || d.Recent[0].Type != event.Expired || d.Recent[0].TraceID != tid(6) {
		t.Errorf("svc:6 recent events %+v, want the expiry first, with the hold's trace", d.Recent)
	}
}

// What pages show: the holder's trace, each waiter's and each recent
// event's; on /blocking the holders', the chains' links' and the
// deadlocks' members'.
func TestTraceIDsShown(t *testing.T) {
	agg, _ := newTestAggregator(t, Config{})
	waiting := func(key, owner, lease string, at time.Duration, n byte, holds ...string) event.Event {
		e := ev(event.Waiting, key, owner, lease, at)
		e.Wait, e.Reason, e.Holder = time.Minute, event.JoinLeases(holds), "?"
		if n != 0 {
			e = withTrace(e, n)
		}
		return e
	}
	s := time.Second
	agg.Apply([]event.Event{
		withTrace(acquired("a", "A", "LA", 0, 0, 1, time.Minute), 1),
		acquired("b", "B", "LB", 0, 0, 1, time.Minute), // untraced hold
		waiting("a", "B", "WB", s, 2, "LB"),            // B holds b and waits for a
		waiting("b", "C", "WC", 2*s, 3),                // C waits for b: C -> B -> A
		waiting("b", "D", "WD", 2*s, 0),                // an untraced waiter
	})
	d, ok := agg.Lock("a")
	if !ok || d.Trace != tid(1) {
		t.Fatalf("Lock(a).Trace = %v, want %v", d.Trace, tid(1))
	}
	if len(d.WaitersNow) != 1 || d.WaitersNow[0].Trace != tid(2) {
		t.Errorf("a's waiters %+v, want B's with trace %v", d.WaitersNow, tid(2))
	}
	if len(d.Recent) != 2 || d.Recent[1].TraceID != tid(1) || d.Recent[0].TraceID != tid(2) {
		t.Errorf("a's recent events %+v, want the waiting (trace 2) then the acquisition (trace 1), newest first", d.Recent)
	}
	db, _ := agg.Lock("b")
	if db.Trace.IsValid() {
		t.Errorf("Lock(b).Trace = %v, want none: its hold is untraced", db.Trace)
	}
	if got := []event.TraceID{db.WaitersNow[0].Trace, db.WaitersNow[1].Trace}; !slices.Contains(got, tid(3)) || !slices.Contains(got, event.TraceID{}) {
		t.Errorf("b's waiters' traces %v, want C's %v and D's none", got, tid(3))
	}

	bl := agg.Blocking()
	holders := map[string]event.TraceID{}
	for _, h := range bl.Holders {
		holders[h.Key] = h.Trace
	}
	if holders["a"] != tid(1) || holders["b"].IsValid() {
		t.Errorf("blocking holders' traces %v, want a: %v, b: none", holders, tid(1))
	}
	var chain []event.TraceID
	for _, c := range bl.Chains {
		if len(c.Links) == 3 && c.Links[0].Owner == "C" {
			for _, l := range c.Links {
				chain = append(chain, l.Trace)
			}
		}
	}
	if want := []event.TraceID{tid(3), tid(2), tid(1)}; !slices.Equal(chain, want) {
		t.Errorf("chain C -> B -> A traces %v, want %v (the waiting calls', then the hold's)", chain, want)
	}

	// A waits for b while holding a: a deadlock whose members carry their
	// waits' traces.
	agg.Apply([]event.Event{waiting("b", "A", "WA", 3*s, 4, "LA")})
	cycles := agg.Deadlocks()
	if len(cycles) != 1 {
		t.Fatalf("deadlocks %+v, want one", cycles)
	}
	got := map[string]event.TraceID{}
	for _, m := range cycles[0].Members {
		got[m.Owner] = m.Trace
	}
	if got["A"] != tid(4) || got["B"] != tid(2) {
		t.Errorf("deadlock members' traces %v, want A: %v, B: %v", got, tid(4), tid(2))
	}
}

package reliability

import (
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

// TestCollectorKeepsHoldsAcrossReorderedEmitters replays, against the
// Aggregator with an injected clock, orderings the paused-holder tests
// (TestPausedHoldersWith*) met on the real stream. Each application process
// has its own emitter, flushed every 100ms, so a process paused (or slow)
// right after acquiring delivers its events after the events of others that
// came later, and a hold's acquired event can arrive after a later hold's
// events or before an earlier hold's.
func TestCollectorKeepsHoldsAcrossReorderedEmitters(t *testing.T) {
	const key = "job:1"
	ttl := 100 * time.Millisecond
	ev := func(typ event.Type, lease string, ms int, reason string) event.Event {
		e := event.Event{Type: typ, Key: key, Lease: lease, Owner: "holder-" + lease, TS: int64(ms) * int64(time.Millisecond), Reason: reason}
		if typ == event.Acquired {
			e.TTL = ttl
		}
		return e
	}
	type batch struct {
		at  int // collector clock, ms
		evs []event.Event
	}
	for _, tc := range []struct {
		name    string
		batches []batch
		holder  string // held after the batches, "" for none
	}{{
		// B acquires at 440 and releases at 470; A acquires at 500 and
		// is paused: its key expires at 600. A's emitter delivers first.
		name: "later hold delivered before an earlier one",
		batches: []batch{
			{520, []event.Event{ev(event.Acquired, "A", 500, "")}},
			{540, []event.Event{ev(event.Acquired, "B", 440, ""), ev(event.Released, "B", 470, "")}},
		},
		holder: "A",
	}, {
		// A acquires at 366 and is paused; its key expires at 466, when B
		// takes it; C follows. A's acquired event arrives after C's, and
		// its loss (the renewer waking up) later still.
		name: "paused hold delivered after its successors",
		batches: []batch{
			{700, []event.Event{ev(event.Acquired, "B", 466, ""), ev(event.Released, "B", 498, ""), ev(event.Acquired, "C", 686, "")}},
			{710, []event.Event{ev(event.Acquired, "A", 366, "")}},
			{730, []event.Event{ev(event.Released, "C", 717, "")}},
			{760, []event.Event{ev(event.Lost, "A", 752, event.ReasonError), ev(event.Released, "A", 753, event.ReasonNotOwner)}},
		},
		holder: "",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			base := time.Unix(1_800_000_000, 0)
			now := base
			at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
			agg := state.New(state.Config{Now: func() time.Time { return now }})
			for _, b := range tc.batches {
				now = at(b.at)
				for i := range b.evs {
					b.evs[i].TS += base.UnixNano()
				}
				agg.Apply(b.evs)
			}
			l, _ := agg.Lock(key)
			if held := map[bool]string{true: l.Lease}[l.Held]; held != tc.holder {
				t.Errorf("Lock(%q) after the events: held by %q, want %q", key, held, tc.holder)
			}
			for ms := 800; ms <= 3000; ms += 100 {
				now = at(ms)
				agg.Tick()
			}
			var leases []string
			for _, x := range agg.Expirations(0) {
				leases = append(leases, x.Lease)
			}
			if len(leases) != 1 || leases[0] != "A" {
				t.Errorf("Expirations() leases = %q, want [A]: A's TTL lapsed while it held the key", leases)
			}
		})
	}
}

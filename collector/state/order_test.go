package state

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lockscope/lockscope/event"
)

// TestReorderedEmitters applies sequences in which one process's events
// reach the stream after a later hold's from another process (each
// emitter flushes on its own schedule). In every case A acquires "o:1" at
// 500 ms with a 100 ms TTL and never ends its hold: it expires while held.
// B's hold is older; its events arrive after A's acquisition unless said
// otherwise.
//
// Decisions: an older hold arriving late never takes the key from A, and
// none of its end events ends A's hold. If its TTL ran past A's start it
// must have ended before A began, so it is never counted as expired; if
// its TTL ran out before A's start it may have expired while held, exactly
// as if its acquisition had come first and A's had superseded it: it
// waits for its late end event (from before its TTL) or the expiry grace.
func TestReorderedEmitters(t *testing.T) {
	ms := time.Millisecond
	aAcq := acquired("o:1", "hA", "A", 500*ms, 0, 1, 100*ms)
	notOwner := ended(event.Released, "o:1", "hB", "B", 650*ms, 350*ms, event.ReasonNotOwner)
	tests := []struct {
		name   string
		first  []event.Event // applied at 520 ms
		late   []event.Event // applied at 540 ms
		held   bool          // A holds the key after the late events
		exps   []string      // leases expired once the grace has passed, sorted
		holds  int64         // holds observed by then
		holdNS time.Duration // their total
	}{
		{
			name:  "older hold with release",
			first: []event.Event{aAcq},
			late: []event.Event{acquired("o:1", "hB", "B", 440*ms, 0, 1, 100*ms),
				ended(event.Released, "o:1", "hB", "B", 470*ms, 30*ms, "")},
			held: true, exps: []string{"A"}, holds: 2, holdNS: 130 * ms,
		},
		{
			name:  "older hold without end, TTL past A's start",
			first: []event.Event{aAcq},
			late:  []event.Event{acquired("o:1", "hB", "B", 440*ms, 0, 1, 100*ms)},
			held:  true, exps: []string{"A"}, holds: 1, holdNS: 100 * ms,
		},
		{
			name:  "older hold without end, TTL before A's start",
			first: []event.Event{aAcq},
			late:  []event.Event{acquired("o:1", "hB", "B", 300*ms, 0, 1, 100*ms)},
			held:  true, exps: []string{"A", "B"}, holds: 2, holdNS: 200 * ms,
		},
		{
			name:  "older hold released before its TTL, no hold figure",
			first: []event.Event{aAcq},
			late: []event.Event{acquired("o:1", "hB", "B", 300*ms, 0, 1, 100*ms),
				ended(event.Released, "o:1", "hB", "B", 350*ms, 0, "")},
			held: true, exps: []string{"A"}, holds: 2, holdNS: 150 * ms,
		},
		{
			name:  "older hold lost after its TTL",
			first: []event.Event{aAcq},
			late: []event.Event{acquired("o:1", "hB", "B", 300*ms, 0, 1, 100*ms),
				ended(event.Lost, "o:1", "hB", "B", 650*ms, 350*ms, event.ReasonNotOwner)},
			held: true, exps: []string{"A", "B"}, holds: 2, holdNS: 200 * ms,
		},
		{
			name:  "older hold lost, TTL past A's start",
			first: []event.Event{aAcq},
			late: []event.Event{acquired("o:1", "hB", "B", 440*ms, 0, 1, 100*ms),
				ended(event.Lost, "o:1", "hB", "B", 480*ms, 40*ms, event.ReasonError)},
			held: true, exps: []string{"A"}, holds: 2, holdNS: 140 * ms,
		},
		{
			name:  "older hold released not_owner",
			first: []event.Event{aAcq},
			late:  []event.Event{acquired("o:1", "hB", "B", 300*ms, 0, 1, 100*ms), notOwner},
			held:  true, exps: []string{"A", "B"}, holds: 2, holdNS: 200 * ms,
		},
		{
			name:  "not_owner release of an unknown older lease",
			first: []event.Event{aAcq},
			late:  []event.Event{notOwner},
			held:  true, exps: []string{"A"}, holds: 1, holdNS: 100 * ms,
		},
		{
			name: "in order: B superseded after its TTL, then lost",
			first: []event.Event{acquired("o:1", "hB", "B", 300*ms, 0, 1, 100*ms), aAcq,
				ended(event.Lost, "o:1", "hB", "B", 520*ms, 220*ms, event.ReasonNotOwner)},
			held: true, exps: []string{"A", "B"}, holds: 2, holdNS: 200 * ms,
		},
		{
			name:  "in order superseded, late renewal past A's start, then release",
			first: []event.Event{acquired("o:1", "hB", "B", 300*ms, 0, 1, 100*ms), aAcq},
			late: []event.Event{renewed("o:1", "hB", "B", 380*ms, 200*ms),
				ended(event.Released, "o:1", "hB", "B", 450*ms, 150*ms, "")},
			held: true, exps: []string{"A"}, holds: 2, holdNS: 250 * ms,
		},
		{
			name: "older hold arrives while another awaits its verdict",
			first: []event.Event{acquired("o:1", "hP", "P", 100*ms, 0, 1, 100*ms), aAcq,
				ended(event.Released, "o:1", "hP", "P", 520*ms, 420*ms, event.ReasonNotOwner)},
			late: []event.Event{acquired("o:1", "hB", "B", 300*ms, 0, 1, 100*ms),
				ended(event.Lost, "o:1", "hB", "B", 650*ms, 350*ms, event.ReasonError)},
			held: true, exps: []string{"A", "B", "P"}, holds: 3, holdNS: 300 * ms,
		},
		{
			name: "two holds superseded after their TTL, the first released late",
			first: []event.Event{acquired("o:1", "hP", "P", 100*ms, 0, 1, 100*ms),
				acquired("o:1", "hQ", "Q", 250*ms, 0, 1, 100*ms), aAcq},
			late: []event.Event{ended(event.Released, "o:1", "hP", "P", 150*ms, 50*ms, "")},
			held: true, exps: []string{"A", "Q"}, holds: 3, holdNS: 250 * ms,
		},
		{
			name: "older hold after A's release",
			first: []event.Event{aAcq,
				ended(event.Released, "o:1", "hA", "A", 520*ms, 20*ms, "")},
			late: []event.Event{acquired("o:1", "hB", "B", 440*ms, 0, 1, 100*ms),
				ended(event.Released, "o:1", "hB", "B", 470*ms, 30*ms, "")},
			held: false, holds: 2, holdNS: 50 * ms,
		},
		{
			name:  "older hold after A's release, no end",
			first: []event.Event{aAcq, ended(event.Released, "o:1", "hA", "A", 520*ms, 20*ms, "")},
			late:  []event.Event{acquired("o:1", "hB", "B", 440*ms, 0, 1, 100*ms)},
			held:  false, holds: 1, holdNS: 20 * ms,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, clk := newTestAggregator(t, Config{})
			clk.Set(aggT0.Add(520 * ms))
			a.Apply(tt.first)
			clk.Set(aggT0.Add(540 * ms))
			a.Apply(tt.late)
			d := mustLock(t, a, "o:1")
			if d.Held != tt.held || d.Lease != "A" || d.Owner != "hA" || (d.Held && !d.Since.Equal(aggT0.Add(500*ms))) {
				t.Errorf("Lock(o:1) = held %v by %s/%s since %v, want held %v by hA/A since 500ms",
					d.Held, d.Owner, d.Lease, d.Since.Sub(aggT0), tt.held)
			}
			if want := countType(tt.first, tt.late, event.Acquired); d.Acquisitions != int64(want) {
				t.Errorf("Lock(o:1).Acquisitions = %d, want %d (late acquisitions count)", d.Acquisitions, want)
			}
			for at := 600 * ms; at <= 3*time.Second; at += 100 * ms {
				clk.Set(aggT0.Add(at))
				a.Tick()
			}
			var got []string
			for _, x := range a.Expirations(0) {
				got = append(got, x.Lease)
			}
			slices.Sort(got)
			if diff := cmp.Diff(tt.exps, got); diff != "" {
				t.Errorf("Expirations() leases (-want +got):\n%s", diff)
			}
			if n := expirations(a, "o:*"); n != float64(len(tt.exps)) {
				t.Errorf("lockscope_expirations_total = %v, want %d", n, len(tt.exps))
			}
			d = mustLock(t, a, "o:1")
			if d.Hold.Count != tt.holds || d.Hold.Sum != tt.holdNS {
				t.Errorf("Lock(o:1).Hold = %d holds, %v in all; want %d, %v", d.Hold.Count, d.Hold.Sum, tt.holds, tt.holdNS)
			}
			if d.Lease != "A" || d.Held {
				t.Errorf("Lock(o:1) after the grace = held %v by %s, want A's hold ended", d.Held, d.Lease)
			}
		})
	}
}

func countType(a, b []event.Event, typ event.Type) int {
	n := 0
	for _, e := range slices.Concat(a, b) {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// TestKeyExpiredWithPendingHold: a keyspace notification names no lease.
// While the current hold's TTL runs, it is the pending (superseded or late
// older) hold's expiry; once that TTL has lapsed, the current hold's.
func TestKeyExpiredWithPendingHold(t *testing.T) {
	ms := time.Millisecond
	for _, tt := range []struct {
		name      string
		at        time.Duration // when the notification arrives
		confirmed string        // the lease whose expiration it confirms
	}{
		{"before A's TTL", 560 * ms, "B"},
		{"after A's TTL", 620 * ms, "A"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, clk := newTestAggregator(t, Config{})
			clk.Set(aggT0.Add(520 * ms))
			a.Apply([]event.Event{acquired("o:1", "hA", "A", 500*ms, 0, 1, 100*ms)})
			clk.Set(aggT0.Add(540 * ms))
			a.Apply([]event.Event{acquired("o:1", "hB", "B", 300*ms, 0, 1, 100*ms)})
			clk.Set(aggT0.Add(tt.at))
			a.KeyExpired("o:1")
			for at := tt.at; at <= 3*time.Second; at += 100 * ms {
				clk.Set(aggT0.Add(at))
				a.Tick()
			}
			got := map[string]bool{}
			for _, x := range a.Expirations(0) {
				got[x.Lease] = x.Confirmed
			}
			if want := map[string]bool{"A": tt.confirmed == "A", "B": tt.confirmed == "B"}; !cmp.Equal(want, got) {
				t.Errorf("Expirations() lease: confirmed = %v, want %v", got, want)
			}
		})
	}
}

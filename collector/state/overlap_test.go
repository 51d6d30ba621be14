package state

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/event"
)

// fenceRejected is a fence guard's refusal of a write fenced with fence,
// naming neither owner nor lease (the resource knows only the fence).
func fenceRejected(key string, fence int64, at time.Duration) event.Event {
	e := ev(event.FenceRejected, key, "", "", at)
	e.Fence, e.Reason = fence, "orders-db"
	return e
}

func fenced(e event.Event, fence int64) event.Event {
	e.Fence = fence
	return e
}

// TestOverlaps: each way two holders come to hold one key at once is one
// overlap incident, from the second holder's acquisition to the first
// holder's last word (its deadline when it said nothing), with its cause,
// both owners and leases and what the first holder did meanwhile; the
// lease_lost and holder_expired fragments of that hold fold into it. The
// healthy cases around each must report none.
func TestOverlaps(t *testing.T) {
	const key = "workflow:7"
	s := time.Second
	ms := time.Millisecond
	type tc struct {
		name  string
		evs   [][]event.Event // applied in turn, a Tick at the event clock between
		want  *Incident       // nil: no overlap
		fragm bool            // a lease_lost incident of the first hold remains (no overlap to fold into)
	}
	cases := []tc{
		{
			// pod-7's 3 s lease lapsed while it was paused; pod-8 took the
			// lock; pod-7 worked on and its release came back not_owner.
			name: "expired, the holder worked on",
			evs: [][]event.Event{
				{acquired(key, "pod-7", "L7", 0, 0, 1, 3*s)},
				{acquired(key, "pod-8", "L8", 3608*ms, 0, 2, 3*s)},
				{ended(event.Lost, key, "pod-7", "L7", 6601*ms, 6601*ms, event.ReasonNotOwner),
					ended(event.Released, key, "pod-7", "L7", 6605*ms, 6605*ms, event.ReasonNotOwner)},
			},
			want: &Incident{Kind: IncidentOverlap, Keys: []string{key}, Owners: []string{"pod-7", "pod-8"}, Leases: []string{"L7", "L8"},
				Start: at(3608 * ms), End: at(6605 * ms), EndedBy: "released", Cause: CauseExpired, RenewalsRefused: 1,
				Detail: "the TTL lapsed under a holder that worked on", Count: 1},
		},
		{
			name: "expired, declared before the successor came, fencing refused two writes",
			evs: [][]event.Event{
				{fenced(acquired(key, "pod-7", "L7", 0, 0, 1, 3*s), 41)},
				{},
				{fenced(acquired(key, "pod-8", "L8", 4500*ms, 0, 2, 3*s), 42)},
				{fenceRejected(key, 41, 5*s), fenceRejected(key, 41, 5100*ms),
					ended(event.Lost, key, "pod-7", "L7", 5200*ms, 5200*ms, event.ReasonNotOwner)},
			},
			want: &Incident{Kind: IncidentOverlap, Keys: []string{key}, Owners: []string{"pod-7", "pod-8"}, Leases: []string{"L7", "L8"},
				Start: at(4500 * ms), End: at(5200 * ms), EndedBy: "lost", Cause: CauseExpired, RenewalsRefused: 1, WritesRefused: 2,
				Detail: "the TTL lapsed under a holder that worked on", Count: 1},
		},
		{
			// A failover lost the lock's write: the successor acquired at
			// once, the first holder's renewal found out 1.4 s later.
			name: "vanished",
			evs: [][]event.Event{
				{acquired(key, "api-1", "LA", 0, 0, 1, 10*s), renewed(key, "api-1", "LA", 3*s, 10*s)},
				{acquired(key, "api-2", "LB", 4*s, 0, 1, 10*s)},
				{ended(event.Lost, key, "api-1", "LA", 5400*ms, 5400*ms, event.ReasonNotOwner)},
			},
			want: &Incident{Kind: IncidentOverlap, Keys: []string{key}, Owners: []string{"api-1", "api-2"}, Leases: []string{"LA", "LB"},
				Start: at(4 * s), End: at(5400 * ms), EndedBy: "lost", Cause: CauseVanished, RenewalsRefused: 1,
				Detail: overlapDetail[causeVanished], Count: 1},
		},
		{
			name: "vanished, the first holder's word applied before the acquisition",
			evs: [][]event.Event{
				{acquired(key, "api-1", "LA", 0, 0, 1, 10*s)},
				{ended(event.Lost, key, "api-1", "LA", 5400*ms, 5400*ms, event.ReasonNotOwner), acquired(key, "api-2", "LB", 4*s, 0, 1, 10*s)},
			},
			want: &Incident{Kind: IncidentOverlap, Keys: []string{key}, Owners: []string{"api-1", "api-2"}, Leases: []string{"LA", "LB"},
				Start: at(4 * s), End: at(5400 * ms), EndedBy: "lost", Cause: CauseVanished,
				Detail: overlapDetail[causeVanished], Count: 1},
		},
		{
			name: "vanished, the first holder silent: until its deadline",
			evs: [][]event.Event{
				{acquired(key, "api-1", "LA", 0, 0, 1, 10*s)},
				{acquired(key, "api-2", "LB", 4*s, 0, 1, 10*s), ended(event.Released, key, "api-2", "LB", 5*s, s, "")},
			},
			want: &Incident{Kind: IncidentOverlap, Keys: []string{key}, Owners: []string{"api-1", "api-2"}, Leases: []string{"LA", "LB"},
				Start: at(4 * s), End: at(10 * s), EndedBy: EndedDeadline, Cause: CauseVanished,
				Detail: overlapDetail[causeVanished], Count: 1},
		},
		{
			name: "forced while the holder worked",
			evs: [][]event.Event{
				{acquired(key, "job-1", "LA", 0, 0, 1, 10*s), ended(event.Forced, key, "job-1", "LA", 2*s, 2*s, "stuck")},
				{acquired(key, "job-2", "LB", 2500*ms, 0, 3, 10*s)},
				{ended(event.Lost, key, "job-1", "LA", 3300*ms, 3300*ms, event.ReasonNotOwner)},
			},
			want: &Incident{Kind: IncidentOverlap, Keys: []string{key}, Owners: []string{"job-1", "job-2"}, Leases: []string{"LA", "LB"},
				Start: at(2500 * ms), End: at(3300 * ms), EndedBy: "lost", Cause: CauseForced, RenewalsRefused: 1,
				Detail: overlapDetail[causeForced], Count: 1},
		},

		{
			// Its library knew (a lost event at its deadline, before the
			// successor came) but its code wrote on: the resource's fence
			// guard refused the write, after the successor's acquisition.
			name: "lost before the successor, its code wrote on",
			evs: [][]event.Event{
				{fenced(acquired(key, "sync/pod-1", "L1", 0, 0, 1, 2*s), 7)},
				{ended(event.Lost, key, "sync/pod-1", "L1", 2*s, 2*s, event.ReasonError)},
				{fenced(acquired(key, "sync/pod-2", "L2", 2100*ms, 0, 2, 8*s), 8)},
				{fenceRejected(key, 7, 5200*ms)},
			},
			want: &Incident{Kind: IncidentOverlap, Keys: []string{key}, Owners: []string{"sync/pod-1", "sync/pod-2"}, Leases: []string{"L1", "L2"},
				Start: at(2100 * ms), End: at(5200 * ms), EndedBy: "fence_rejected", Cause: CauseExpired, WritesRefused: 1,
				Detail: overlapDetail[causeExpired], Count: 1},
		},

		// Healthy: none of these is two holders at once.
		{
			name: "clean hand-off of a fenced lock",
			evs: [][]event.Event{
				{fenced(acquired(key, "a", "LA", 0, 0, 1, 10*s), 7), ended(event.Released, key, "a", "LA", 2*s, 2*s, ""),
					fenced(acquired(key, "b", "LB", 2001*ms, 0, 2, 10*s), 8)},
				{ended(event.Released, key, "b", "LB", 3*s, s, "")},
			},
		},
		{
			name: "clean hand-off",
			evs: [][]event.Event{
				{acquired(key, "a", "LA", 0, 0, 1, 10*s), ended(event.Released, key, "a", "LA", 2*s, 2*s, ""),
					acquired(key, "b", "LB", 2001*ms, 0, 2, 10*s)},
			},
		},
		{
			name: "clean hand-off, the release applied after the acquisition",
			evs: [][]event.Event{
				{acquired(key, "a", "LA", 0, 0, 1, 10*s)},
				{acquired(key, "b", "LB", 2001*ms, 0, 2, 10*s)},
				{ended(event.Released, key, "a", "LA", 2*s, 2*s, "")},
			},
		},
		{
			name: "a renewal by the first holder after the acquisition (clocks apart)",
			evs: [][]event.Event{
				{acquired(key, "a", "LA", 0, 0, 1, 10*s)},
				{acquired(key, "b", "LB", 4*s, 0, 2, 10*s)},
				{renewed(key, "a", "LA", 4100*ms, 10*s)},
			},
		},
		{
			// The renewal was sent just before the TTL ran out and landed
			// just after: the successor acquired in between.
			name:  "a renewal racing the expiry it was to prevent",
			fragm: true,
			evs: [][]event.Event{
				{acquired(key, "a", "LA", 0, 0, 1, time.Second)},
				{acquired(key, "b", "LB", 1000*ms, 0, 2, 10*s)},
				{ended(event.Lost, key, "a", "LA", 1040*ms, 1040*ms, event.ReasonNotOwner)},
			},
		},
		{
			// Its renewals could not get through: it stopped at its own
			// deadline, before the successor came.
			name:  "lost at its deadline, before the successor",
			fragm: true,
			evs: [][]event.Event{
				{acquired(key, "a", "LA", 0, 0, 1, 2*s)},
				{acquired(key, "b", "LB", 2050*ms, 0, 2, 10*s)},
				{ended(event.Lost, key, "a", "LA", 2400*ms, 2400*ms, event.ReasonError)},
			},
		},
		{
			name: "the holder died",
			evs: [][]event.Event{
				{acquired(key, "a", "LA", 0, 0, 1, 2*s)},
				{acquired(key, "b", "LB", 3*s, 0, 2, 10*s)},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log := &incidentLog{}
			a, clk := newTestAggregator(t, Config{Incidents: log, StuckAfter: time.Hour})
			var last time.Duration
			for _, chunk := range tc.evs {
				for _, e := range chunk {
					last = max(last, time.Duration(e.TS-aggT0.UnixNano()))
				}
				clk.Set(at(last + 1500*time.Millisecond))
				a.Apply(chunk)
				a.Tick()
			}
			clk.Set(at(last + time.Minute)) // every watch decided
			a.Tick()

			got := log.of(IncidentOverlap)
			tl := tallyOf(a)
			var n float64
			for _, cause := range OverlapCauses {
				n += tl.get("overlaps_"+cause, "workflow:*")
			}
			if tc.want == nil {
				if len(got) != 0 || n != 0 {
					t.Fatalf("overlaps = %+v (counted %v), want none", got, n)
				}
			} else {
				if d := cmp.Diff([]Incident{*tc.want}, got, ignoreIncidentID); d != "" {
					t.Errorf("overlap incidents (-want +got):\n%s", d)
				}
				if c := tl.get("overlaps_"+tc.want.Cause, "workflow:*"); c != 1 || n != 1 {
					t.Errorf("overlaps_total{cause=%s} = %v (all causes %v), want 1", tc.want.Cause, c, n)
				}
				wantSec := tc.want.End.Sub(tc.want.Start).Seconds()
				if o, sum := tl.observed("overlap_seconds", "workflow:*"), tl.get("overlap_seconds", "workflow:*"); o != 1 || sum != wantSec {
					t.Errorf("overlap_seconds: %d observations summing to %v, want 1 of %v", o, sum, wantSec)
				}
				if ov := a.Overview(); ov.Overlaps5m != 1 {
					t.Errorf("Overview().Overlaps5m = %d, want 1", ov.Overlaps5m)
				}
				if ovs := a.Overlaps(key); len(ovs) != 1 || !ovs[0].End.Equal(tc.want.End) || ovs[0].Cause != tc.want.Cause {
					t.Errorf("Overlaps(%q) = %+v, want the one overlap", key, ovs)
				}
			}
			// One story per hold: a first holder that worked on is not also
			// a holder that said nothing, nor a separate loss.
			if tc.want != nil {
				for _, in := range log.of(IncidentHolderExpired) {
					if in.Owners[0] == tc.want.Owners[0] {
						t.Errorf("holder_expired incident %+v beside the overlap", in)
					}
				}
			}
			if lost := log.of(IncidentLeaseLost); (len(lost) > 0) != tc.fragm {
				t.Errorf("lease_lost incidents = %+v, want some: %v", lost, tc.fragm)
			}
		})
	}
}

// TestOverlapFencingWords: the overlap says what the fence guards saw.
func TestOverlapFencingWords(t *testing.T) {
	for n, want := range map[int]string{0: "no fencing seen: check what both holders wrote", 1: "fencing held: 1 stale write refused",
		3: "fencing held: 3 stale writes refused"} {
		if got := Fencing(n); got != want {
			t.Errorf("Fencing(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestOverlapMergesWithItsFragment: an overlap's record and its first
// hold's lease_lost record share an id; merged in either order, the
// overlap's kind and times win and the counts are the largest.
func TestOverlapMergesWithItsFragment(t *testing.T) {
	frag := Incident{ID: "x", Kind: IncidentLeaseLost, Keys: []string{"k"}, Owners: []string{"A"}, Start: at(3 * time.Second),
		End: at(6 * time.Second), EndedBy: "lost", Detail: "the holder found its lock gone or taken", Count: 1}
	ov := Incident{ID: "x", Kind: IncidentOverlap, Keys: []string{"k"}, Owners: []string{"A", "B"}, Leases: []string{"LA", "LB"},
		Start: at(4 * time.Second), End: at(5 * time.Second), EndedBy: "released", Cause: CauseExpired, Detail: "d", Count: 1, WritesRefused: 2}
	for _, got := range []Incident{Merge(frag, ov), Merge(ov, frag)} {
		if got.Kind != IncidentOverlap || !got.Start.Equal(ov.Start) || !got.End.Equal(ov.End) || got.EndedBy != "released" ||
			got.Cause != CauseExpired || got.WritesRefused != 2 || len(got.Owners) != 2 || len(got.Leases) != 2 || got.Detail != "d" {
			t.Errorf("Merge = %+v, want the overlap's story", got)
		}
	}
}

// TestExpirationLabels: a watched lock's expiry is "holder unknown"
// (Passive, not HolderWorking) and its holder_expired incident says so,
// until the same owner acquires it again (it was alive); a library lock
// whose holder said nothing after its deadline is the holder that died.
func TestExpirationLabels(t *testing.T) {
	log := &incidentLog{}
	a, clk := newTestAggregator(t, Config{Incidents: log})
	passive := func(e event.Event) event.Event { e.Passive = true; return e }
	clk.Set(at(time.Second))
	a.Apply([]event.Event{
		passive(acquired("redlock:a", "tok-a", "", 0, 0, 1, 2*time.Second)),
		passive(acquired("redlock:b", "tok-b", "", 0, 0, 1, 2*time.Second)),
		acquired("lib:c", "pod-c", "LC", 0, 0, 1, 2*time.Second),
	})
	clk.Set(at(2 * time.Second))
	a.KeyExpired("redlock:a")
	a.KeyExpired("redlock:b")
	clk.Set(at(4 * time.Second))
	a.Tick() // lib:c declared expired
	a.Apply([]event.Event{passive(acquired("redlock:b", "tok-b", "", 2500*time.Millisecond, 0, 1, 2*time.Second)),
		passive(ended(event.Released, "redlock:b", "tok-b", "", 3*time.Second, 500*time.Millisecond, ""))})
	for _, d := range []time.Duration{30 * time.Second, time.Minute} { // a passive release waits for a forced one first
		clk.Set(at(d))
		a.Tick()
	}

	got := map[string][2]bool{}
	for _, e := range a.Expirations(0) {
		got[e.Key] = [2]bool{e.Passive, e.HolderWorking}
	}
	want := map[string][2]bool{"redlock:a": {true, false}, "redlock:b": {true, true}, "lib:c": {false, false}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("expirations {Passive, HolderWorking} (-want +got):\n%s", d)
	}
	details := map[string]string{}
	for _, in := range log.of(IncidentHolderExpired) {
		for _, k := range in.Keys {
			details[k] = in.Detail
		}
	}
	wantD := map[string]string{
		"redlock:a": "TTL lapsed while held; a watched lock: whether its holder worked on is unknown",
		"lib:c":     "TTL lapsed while held; the holder said nothing after its lease's deadline: it died, hung or lost Redis",
	}
	if d := cmp.Diff(wantD, details); d != "" {
		t.Errorf("holder_expired incidents by key (-want +got):\n%s", d)
	}
}

// TestOverlapsAgreeAfterARestart: a replica that applied the events live
// and one that replays them after a restart (by event time, muted) derive
// the same overlap incident under the same id, and count it in the same
// overview.
func TestOverlapsAgreeAfterARestart(t *testing.T) {
	const key = "workflow:7"
	evs := []event.Event{
		acquired(key, "pod-7", "L7", 0, 0, 1, 3*time.Second),
		renewed(key, "other", "LX", time.Second, time.Second), // another key's traffic in between
		acquired(key, "pod-8", "L8", 3608*time.Millisecond, 0, 2, 30*time.Second),
		ended(event.Lost, key, "pod-7", "L7", 6601*time.Millisecond, 6601*time.Millisecond, event.ReasonNotOwner),
		ended(event.Released, key, "pod-7", "L7", 6605*time.Millisecond, 6605*time.Millisecond, event.ReasonNotOwner),
	}
	live, replayed := &incidentLog{}, &incidentLog{}
	a, clk := newTestAggregator(t, Config{Incidents: live})
	for _, e := range evs {
		clk.Set(time.Unix(0, e.TS).Add(200 * time.Millisecond))
		a.Apply([]event.Event{e})
		a.Tick()
	}
	b, clkB := newTestAggregator(t, Config{Incidents: replayed})
	clkB.Set(at(8 * time.Second))
	b.BeginReplay(aggT0)
	b.Replay(evs, false)
	b.EndReplay(at(7 * time.Second))
	for _, c := range []*aggClock{clk, clkB} {
		c.Set(at(time.Minute))
	}
	a.Tick()
	b.Tick()
	if d := cmp.Diff(live.of(IncidentOverlap), replayed.of(IncidentOverlap)); d != "" || len(live.of(IncidentOverlap)) != 1 {
		t.Errorf("overlaps (-live +replayed), want one each:\n%s", d)
	}
	if oa, ob := a.Overview().Overlaps5m, b.Overview().Overlaps5m; oa != 1 || ob != 1 {
		t.Errorf("Overlaps5m: live %d, replayed %d, want 1 each", oa, ob)
	}
}

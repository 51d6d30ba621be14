package state

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockscope/lockscope/event"
)

// incidentLog is an IncidentSink that merges the records by id, as the
// collector's store does.
type incidentLog struct {
	mu   sync.Mutex
	recs int
	byID map[string]Incident
}

func (l *incidentLog) Incident(in Incident) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs++
	if l.byID == nil {
		l.byID = make(map[string]Incident)
	}
	if old, ok := l.byID[in.ID]; ok {
		in = Merge(old, in)
	}
	l.byID[in.ID] = in
}

// of returns the incidents of kind, by start then first key.
func (l *incidentLog) of(kind IncidentKind) []Incident {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Incident
	for _, in := range l.byID {
		if in.Kind == kind {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b Incident) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return slices.Compare(a.Keys, b.Keys)
	})
	return out
}

func at(d time.Duration) time.Time { return aggT0.Add(d) }

var ignoreIncidentID = cmpopts.IgnoreFields(Incident{}, "ID")

// TestIncidentsOfHolds: a hold past its stuck threshold opens a stuck
// incident when the scan sees it and closes it with the hold; a holder that
// finds its lease gone is a lease_lost incident from the lapse to the
// discovery; silent holders' expirations fold into one holder_expired
// incident per owner; forced releases into one forced incident per holder,
// operator and reason.
func TestIncidentsOfHolds(t *testing.T) {
	log := &incidentLog{}
	a, clk := newTestAggregator(t, Config{StuckAfter: time.Minute, Incidents: log})
	clk.Set(at(40 * time.Second))
	a.Apply([]event.Event{
		acquired("stuck:1", "A", "L1", 0, 0, 1, 10*time.Minute),
		acquired("lost:1", "B", "L2", 0, 0, 1, 30*time.Second),
		acquired("dead:1", "C", "L3", 0, 0, 1, 10*time.Second),
		acquired("dead:2", "C", "L4", time.Second, 0, 1, 10*time.Second),
		acquired("forced:1", "D", "L5", 0, 0, 1, 10*time.Minute),
		acquired("forced:2", "D", "L6", 0, 0, 1, 10*time.Minute),
		ended(event.Lost, "lost:1", "B", "L2", 40*time.Second, 40*time.Second, event.ReasonNotOwner),
	})
	a.Tick() // dead:1 and dead:2 expired at 10 and 11 s
	if stuck := log.of(IncidentStuck); len(stuck) != 0 {
		t.Fatalf("stuck incidents at 40 s = %+v, want none", stuck)
	}
	clk.Set(at(100 * time.Second))
	a.Tick()
	stuck := log.of(IncidentStuck)
	// forced:1 and forced:2 are stuck too (100 s > 1 m).
	if len(stuck) != 3 || !stuck[0].Open() {
		t.Fatalf("stuck incidents after the scan = %+v, want three open", stuck)
	}
	if n := tallyOf(a).get("incidents_stuck", ""); n != 3 {
		t.Errorf("incidents_total{kind=stuck} = %v, want 3", n)
	}

	f := func(key, lease string, ts time.Duration) event.Event {
		e := ended(event.Forced, key, "D", lease, ts, ts, "deploy stuck")
		e.By = "alice"
		return e
	}
	clk.Set(at(3 * time.Minute))
	a.Apply([]event.Event{
		ended(event.Released, "stuck:1", "A", "L1", 2*time.Minute, 2*time.Minute, ""),
		f("forced:1", "L5", 150*time.Second),
		f("forced:2", "L6", 151*time.Second),
	})
	a.Tick()

	want := []Incident{
		{Kind: IncidentStuck, Keys: []string{"forced:1"}, Owners: []string{"D"}, Start: at(time.Minute), End: at(150 * time.Second), EndedBy: "forced", Count: 1},
		{Kind: IncidentStuck, Keys: []string{"forced:2"}, Owners: []string{"D"}, Start: at(time.Minute), End: at(151 * time.Second), EndedBy: "forced", Count: 1},
		{Kind: IncidentStuck, Keys: []string{"stuck:1"}, Owners: []string{"A"}, Start: at(time.Minute), End: at(2 * time.Minute), EndedBy: "released", Count: 1},
	}
	if d := cmp.Diff(want, log.of(IncidentStuck), ignoreIncidentID); d != "" {
		t.Errorf("stuck incidents (-want +got):\n%s", d)
	}
	want = []Incident{{Kind: IncidentLeaseLost, Keys: []string{"lost:1"}, Owners: []string{"B"}, Start: at(30 * time.Second),
		End: at(40 * time.Second), EndedBy: "lost", Detail: "the holder found its lock gone or taken", Count: 1}}
	if d := cmp.Diff(want, log.of(IncidentLeaseLost), ignoreIncidentID); d != "" {
		t.Errorf("lease_lost incidents (-want +got):\n%s", d)
	}
	want = []Incident{{Kind: IncidentHolderExpired, Keys: []string{"dead:1", "dead:2"}, Owners: []string{"C"}, Start: at(10 * time.Second),
		End: at(11 * time.Second), EndedBy: "expired", Detail: "TTL lapsed while held; the holder said nothing after its lease's deadline: it died, hung or lost Redis", Count: 2}}
	if d := cmp.Diff(want, log.of(IncidentHolderExpired), ignoreIncidentID); d != "" {
		t.Errorf("holder_expired incidents (-want +got):\n%s", d)
	}
	want = []Incident{{Kind: IncidentForced, Keys: []string{"forced:1", "forced:2"}, Owners: []string{"D"}, Start: at(150 * time.Second),
		End: at(151 * time.Second), EndedBy: "forced", Detail: "by alice: deploy stuck", Count: 2}}
	if d := cmp.Diff(want, log.of(IncidentForced), ignoreIncidentID); d != "" {
		t.Errorf("forced incidents (-want +got):\n%s", d)
	}
	tl := tallyOf(a)
	for kind, n := range map[IncidentKind]float64{IncidentStuck: 3, IncidentLeaseLost: 1, IncidentHolderExpired: 1, IncidentForced: 1} {
		if got := tl.get("incidents_"+string(kind), ""); got != n {
			t.Errorf("incidents_total{kind=%s} = %v, want %v (each incident counted once)", kind, got, n)
		}
	}
}

// TestIncidentsAreDeterministic: two aggregators that apply the same events
// (replicas), one of them in two chunks and ticking at other times, derive
// the same incidents under the same ids.
func TestIncidentsAreDeterministic(t *testing.T) {
	evs := []event.Event{
		acquired("s:1", "A", "L1", 0, 0, 1, 10*time.Minute),
		acquired("e:1", "C", "L3", 0, 0, 1, 10*time.Second),
		ended(event.Lost, "e:2", "B", "L2", 40*time.Second, 40*time.Second, event.ReasonError),
		ended(event.Released, "s:1", "A", "L1", 2*time.Minute, 2*time.Minute, ""),
	}
	run := func(split int, ticks []time.Duration) map[string]Incident {
		log := &incidentLog{}
		a, clk := newTestAggregator(t, Config{StuckAfter: time.Minute, Incidents: log})
		clk.Set(at(30 * time.Second))
		a.Apply(evs[:split])
		for _, d := range ticks {
			clk.Set(at(d))
			a.Tick()
		}
		a.Apply(evs[split:])
		clk.Set(at(3 * time.Minute))
		a.Tick()
		return log.byID
	}
	one, two := run(2, []time.Duration{90 * time.Second}), run(1, []time.Duration{20 * time.Second, 70 * time.Second, 100 * time.Second})
	if len(one) != 3 {
		t.Errorf("incidents = %d, want 3 (stuck, holder_expired, lease_lost): %+v", len(one), one)
	}
	if d := cmp.Diff(one, two); d != "" {
		t.Errorf("replicas' incidents differ (-one +two):\n%s", d)
	}
}

// TestIncidentsOfWaits: a deadlock opens when the scan finds its cycle and
// ends with the first member's wait to end (how it ended); a wait queue of
// three callers, the oldest past 30 s, opens with the holder they wait for
// and drains when fewer wait.
func TestIncidentsOfWaits(t *testing.T) {
	log := &incidentLog{}
	a, clk := newTestAggregator(t, Config{Incidents: log})
	waiting := func(key, owner, lease string, at time.Duration, holds ...string) event.Event {
		e := ev(event.Waiting, key, owner, lease, at)
		e.Wait, e.Reason = 10*time.Minute, event.JoinLeases(holds)
		return e
	}
	clk.Set(at(5 * time.Second))
	a.Apply([]event.Event{
		acquired("a", "A", "LA", 0, 0, 1, time.Minute),
		acquired("b", "B", "LB", 0, 0, 1, time.Minute),
		waiting("b", "A", "WA", 2*time.Second, "LA"),
		waiting("a", "B", "WB", 3*time.Second, "LB"),
		acquired("q", "H", "LH", 0, 0, 1, 10*time.Minute),
		waiting("q", "W1", "Q1", time.Second),
		waiting("q", "W2", "Q2", 2*time.Second),
		waiting("q", "W3", "Q3", 4*time.Second),
	})
	a.Tick()
	dl := log.of(IncidentDeadlock)
	if len(dl) != 1 || !dl[0].Open() || !dl[0].Start.Equal(at(3*time.Second)) || !slices.Equal(dl[0].Owners, []string{"A", "B"}) && !slices.Equal(dl[0].Owners, []string{"B", "A"}) {
		t.Fatalf("deadlock incidents = %+v, want one open since 3s, owners A and B", dl)
	}
	if q := log.of(IncidentWaitQueue); len(q) != 0 {
		t.Errorf("wait queue incidents before 30 s = %+v, want none", q)
	}
	clk.Set(at(40 * time.Second))
	f := failed("a", "B", 35*time.Second, 32*time.Second, 3, event.ReasonTimeout)
	f.Lease = "WB"
	a.Apply([]event.Event{f})
	a.Tick()
	dl = log.of(IncidentDeadlock)
	if len(dl) != 1 || !dl[0].End.Equal(at(35*time.Second)) || dl[0].EndedBy != EndedTimedOut {
		t.Errorf("deadlock incidents = %+v, want one ended at 35s, timed_out", dl)
	}
	q := log.of(IncidentWaitQueue)
	if len(q) != 1 || !q[0].Open() || !q[0].Start.Equal(at(31*time.Second)) || !slices.Equal(q[0].Owners, []string{"H"}) || !slices.Equal(q[0].Keys, []string{"q"}) {
		t.Fatalf("wait queue incidents = %+v, want one open on q since 31s (the oldest's 30 s), owner H", q)
	}
	g := acquired("q", "W1", "Q1", 50*time.Second, 49*time.Second, 3, time.Minute)
	clk.Set(at(55 * time.Second))
	a.Apply([]event.Event{ended(event.Released, "q", "H", "LH", 50*time.Second, 50*time.Second, ""), g})
	clk.Set(at(57 * time.Second))
	a.Tick()
	q = log.of(IncidentWaitQueue)
	if len(q) != 1 || q[0].Open() || q[0].EndedBy != EndedDrained {
		t.Errorf("wait queue incidents = %+v, want it drained", q)
	}
}

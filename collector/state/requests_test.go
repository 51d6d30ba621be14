package state

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/event"
)

// requested builds an operator's release request of lease at T0+at.
func requested(key, owner, lease string, at time.Duration, by, reason string, grace time.Duration, heard int64) event.Event {
	e := ev(event.Requested, key, owner, lease, at)
	e.By, e.Reason, e.Wait, e.Count = by, reason, grace, heard
	return e
}

// TestReleaseRequests: each hold asked ends its request one way — its
// holder released it, an operator forced it, or it ignored the request
// (expired, or outlasted the patience) — counted once per hold, one
// incident from the request to the answer; a hold nobody asked has none.
func TestReleaseRequests(t *testing.T) {
	log := &incidentLog{}
	a, clk := newTestAggregator(t, Config{StuckAfter: time.Hour, Incidents: log})
	const ttl = 30 * time.Second
	ask := 3 * time.Minute
	clk.Set(at(ask + 40*time.Second)) // no event is from the collector's future
	forced := ended(event.Forced, "wf:2", "B", "L2", ask+30*time.Second, ask, "no answer")
	forced.By = "bob"
	a.Apply([]event.Event{
		acquired("wf:1", "A", "L1", 0, 0, 1, ttl),
		acquired("wf:2", "B", "L2", 0, 0, 1, ttl),
		acquired("wf:3", "C", "L3", 0, 0, 1, ttl),
		acquired("wf:4", "D", "L4", 0, 0, 1, ttl),
		acquired("wf:5", "E", "L5", 0, 0, 1, ttl),
		acquired("wf:7", "G", "L7", 0, 0, 1, ttl),
		acquired("quiet:1", "Q", "LQ", 0, 0, 1, ttl),
		requested("wf:1", "A", "L1", ask, "bob", "I need to edit it", 30*time.Second, 1),
		ended(event.Released, "wf:1", "A", "L1", ask+4*time.Second, ask, ""),
		requested("wf:2", "B", "L2", ask, "bob", "", 30*time.Second, 1),
		forced,
		requested("wf:3", "C", "L3", ask, "bob", "", 30*time.Second, 1),
		renewed("wf:3", "C", "L3", ask+10*time.Second, ttl),
		requested("wf:4", "D", "L4", ask, "bob", "", 0, 0),
		ended(event.Expired, "wf:4", "D", "L4", ask+20*time.Second, ask, ""),
		// The holder's release reached the stream before the request.
		ended(event.Released, "wf:5", "E", "L5", ask+time.Second, ask, ""),
		requested("wf:5", "E", "L5", ask, "bob", "", 0, 1),
		requested("wf:7", "G", "L7", ask, "bob", "first", 0, 1),
		requested("wf:7", "G", "L7", ask+2*time.Second, "alice", "again", 0, 1),
		ended(event.Released, "wf:7", "G", "L7", ask+3*time.Second, ask, ""),
		ended(event.Released, "quiet:1", "Q", "LQ", ask+time.Second, ask, ""),
	})
	// The event clock runs 10 s behind the collector's here: the newest
	// event (ask+30s) was applied at ask+40s.
	clk.Set(at(ask + 40*time.Second + requestPatience - time.Second))
	a.Tick()
	if open := openOf(log.of(IncidentReleaseRequest)); len(open) != 1 || open[0].Keys[0] != "wf:3" {
		t.Fatalf("open release requests before the patience runs out = %+v, want wf:3's", open)
	}
	clk.Set(at(ask + 40*time.Second + requestPatience))
	a.Tick()

	want := []Incident{
		{Kind: IncidentReleaseRequest, Keys: []string{"wf:1"}, Owners: []string{"A"}, Start: at(ask), End: at(ask + 4*time.Second), EndedBy: "released",
			Detail: "asked by bob: I need to edit it; grace 30s; heard by 1 listener", Count: 1},
		{Kind: IncidentReleaseRequest, Keys: []string{"wf:2"}, Owners: []string{"B"}, Start: at(ask), End: at(ask + 30*time.Second), EndedBy: "forced",
			Detail: "asked by bob; grace 30s; heard by 1 listener", Count: 1},
		{Kind: IncidentReleaseRequest, Keys: []string{"wf:3"}, Owners: []string{"C"}, Start: at(ask), End: at(ask + 30*time.Second + requestPatience), EndedBy: "ignored",
			Detail: "asked by bob; grace 30s; heard by 1 listener", Count: 1},
		{Kind: IncidentReleaseRequest, Keys: []string{"wf:4"}, Owners: []string{"D"}, Start: at(ask), End: at(ask + 20*time.Second), EndedBy: "ignored",
			Detail: "asked by bob; nobody heard it (the holder does not listen)", Count: 1},
		{Kind: IncidentReleaseRequest, Keys: []string{"wf:5"}, Owners: []string{"E"}, Start: at(ask), End: at(ask + time.Second), EndedBy: "released",
			Detail: "asked by bob; heard by 1 listener", Count: 1},
		{Kind: IncidentReleaseRequest, Keys: []string{"wf:7"}, Owners: []string{"G"}, Start: at(ask), End: at(ask + 3*time.Second), EndedBy: "released",
			Detail: "asked by bob: first; heard by 1 listener", Count: 1},
	}
	if d := cmp.Diff(want, log.of(IncidentReleaseRequest), ignoreIncidentID); d != "" {
		t.Errorf("release_request incidents (-want +got):\n%s", d)
	}
	tl := tallyOf(a)
	for outcome, n := range map[string]float64{"released": 3, "forced": 1, "ignored": 2} {
		if got := tl.get("release_requests_"+outcome, "wf:*"); got != n {
			t.Errorf("release_requests_total{class=wf:*,outcome=%s} = %v, want %v", outcome, got, n)
		}
		if got := tl.get("release_requests_"+outcome, "quiet:*"); got != 0 {
			t.Errorf("release_requests_total{class=quiet:*,outcome=%s} = %v, want 0 (nobody asked)", outcome, got)
		}
	}
	if got := tl.get("incidents_release_request", ""); got != 6 {
		t.Errorf("incidents_total{kind=release_request} = %v, want 6", got)
	}
	if len(a.requests) != 0 {
		t.Errorf("pending requests after every answer = %d, want 0", len(a.requests))
	}

	// The key's recent events show the request: who, why, the grace and
	// how many heard it.
	d, _ := a.Lock("wf:1")
	var got *event.Event
	for i := range d.Recent {
		if d.Recent[i].Type == event.Requested {
			got = &d.Recent[i]
		}
	}
	if got == nil || got.By != "bob" || got.Reason != "I need to edit it" || got.Wait != 30*time.Second || got.Count != 1 || got.Lease != "L1" || got.Attempts != 0 {
		t.Errorf("recent requested event of wf:1 = %+v, want bob's, its reason, grace 30s, count 1", got)
	}
}

func openOf(ins []Incident) []Incident {
	var out []Incident
	for _, in := range ins {
		if in.Open() {
			out = append(out, in)
		}
	}
	return out
}

// TestReleaseRequestsBounded: requests that no answer ends are bounded in
// number; one more decides the oldest as ignored.
func TestReleaseRequestsBounded(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	clk.Set(at(time.Minute))
	var evs []event.Event
	for i := range maxPendingRequests + 10 {
		key := "k:" + strconv.Itoa(i)
		lease := "L" + strconv.Itoa(i)
		evs = append(evs, acquired(key, "o", lease, 0, 0, 1, time.Hour),
			requested(key, "o", lease, time.Duration(i)*time.Millisecond, "bob", "", time.Hour, 1))
	}
	a.Apply(evs)
	if n := len(a.requests); n != maxPendingRequests {
		t.Errorf("pending requests = %d, want %d", n, maxPendingRequests)
	}
	if got := tallyOf(a).get("release_requests_ignored", "k:*"); got != 10 {
		t.Errorf("requests decided ignored to make room = %v, want 10", got)
	}
	if _, ok := a.requests[requestKey("k:0", "L0")]; ok {
		t.Errorf("the oldest request is still pending")
	}
}

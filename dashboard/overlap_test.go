package dashboard

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// TestOverlapShownAsOneStory: a holder whose lease lapsed worked on while a
// second holder had the lock (pod-7's story): /incidents lists one overlap
// naming both owners with its cause and what fencing saw, /api/v1/incidents
// gives its cause, both leases and refusals, the overview counts it in its
// own tile, the key page shades it on the timeline; a watched lock's expiry is labelled holder unknown, not holder
// died.
func TestOverlapShownAsOneStory(t *testing.T) {
	f := newFixture(t, nil)
	now := time.Now()
	at := func(d time.Duration) int64 { return now.Add(-d).UnixNano() }
	key, watched := f.pfx+"workflow:7", f.pfx+"redlock:report"
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: key, Owner: "pod-7", Lease: "L7", TS: at(20 * time.Second), TTL: 3 * time.Second, Attempts: 1, Fence: 41},
		{Type: event.Acquired, Key: key, Owner: "pod-8", Lease: "L8", TS: at(16400 * time.Millisecond), TTL: 30 * time.Second, Attempts: 2, Fence: 42},
		{Type: event.FenceRejected, Key: key, Fence: 41, Reason: "workflows-db", TS: at(14 * time.Second)},
		{Type: event.Lost, Key: key, Owner: "pod-7", Lease: "L7", TS: at(13400 * time.Millisecond), Reason: event.ReasonNotOwner},
		{Type: event.Released, Key: key, Owner: "pod-7", Lease: "L7", TS: at(13390 * time.Millisecond), Reason: event.ReasonNotOwner},
		{Type: event.Acquired, Key: watched, Owner: "redlock 1f2e", TS: at(30 * time.Second), TTL: time.Second, Attempts: 1, Passive: true},
		{Type: event.Expired, Key: watched, Owner: "redlock 1f2e", TS: at(29 * time.Second), Passive: true},
	})
	f.agg.Tick()
	f.flushIncidents(t)

	doc := htmlDoc(t, f.do(t, req{target: "/incidents"}))
	var row = -1
	rows := byTestID(doc, "incident-row")
	for i, r := range rows {
		if attr(r, "data-kind") == "overlap" {
			if row >= 0 {
				t.Fatalf("two overlap rows: want one story")
			}
			row = i
		}
		if attr(r, "data-kind") == "lease_lost" {
			t.Errorf("a lease_lost row beside the overlap: %q", text(r))
		}
	}
	if row < 0 {
		t.Fatalf("no overlap row among %d incidents", len(rows))
	}
	r := rows[row]
	if got := text(one(t, r, "incident-cause")); got != "expired" {
		t.Errorf("overlap cause = %q, want expired", got)
	}
	if got := text(r); !strings.Contains(got, "pod-7") || !strings.Contains(got, "pod-8") || !strings.Contains(got, "fencing held: 1 stale write refused") ||
		!strings.Contains(got, "3.01s") {
		t.Errorf("overlap row = %q, want both owners, what fencing saw and its 3 s length", got)
	}

	api := decodeJSON[apiIncidents](t, f.do(t, req{target: "/api/v1/incidents"}))
	var ov *apiIncident
	for i := range api.Incidents {
		if api.Incidents[i].Kind == "overlap" {
			ov = &api.Incidents[i]
		}
	}
	if ov == nil || ov.OverlapFields == nil {
		t.Fatalf("API incidents = %+v, want an overlap", api.Incidents)
	}
	want := time.Unix(0, at(16400*time.Millisecond)).Truncate(time.Millisecond)
	if ov.Cause != "expired" || !slices.Equal(ov.Leases, []string{"L7", "L8"}) || !slices.Equal(ov.Owners, []string{"pod-7", "pod-8"}) ||
		ov.WritesRefused != 1 || ov.RenewalsRefused != 1 || ov.Fencing != "fencing held: 1 stale write refused" || !ov.Start.Equal(want) ||
		ov.End == nil || ov.EndedBy != "released" {
		t.Errorf("API overlap = %+v %+v, want cause expired, leases L7 L8, 1 write and 1 renewal refused, from %v, ended by released", *ov, *ov.OverlapFields, want)
	}

	// The key page draws both holds, the first holder's work past its
	// lease, and shades the overlap with its length.
	kp := htmlDoc(t, f.do(t, req{target: keyPath(key)}))
	shades := byTestID(kp, "timeline-overlap")
	if len(shades) != 1 || !strings.HasSuffix(text(shades[0]), "overlap 3.01s") || !strings.Contains(text(shades[0]), "pod-7 and pod-8") {
		var got []string
		for _, s := range shades {
			got = append(got, text(s))
		}
		t.Errorf("timeline overlaps = %q, want one labelled \"overlap 3.01s\"", got)
	}

	home := htmlDoc(t, f.do(t, req{target: "/"}))
	if v := text(one(t, one(t, home, "stat-overlaps"), "value")); v != "1" {
		t.Errorf("overlaps tile = %q, want 1", v)
	}
	kinds := map[string]string{}
	for _, row := range byTestID(home, "expiration-row") {
		kinds[attr(one(t, row, "expiration-link"), "title")] = text(one(t, row, "expiration-kind"))
	}
	if kinds[watched] != "holder unknown" {
		t.Errorf("expiration kinds = %q, want %s: holder unknown", kinds, watched)
	}
	if o := decodeJSON[apiOverview](t, f.do(t, req{target: "/api/v1/overview"})); o.Overlaps5m != 1 {
		t.Errorf("API overview overlaps_5m = %d, want 1", o.Overlaps5m)
	}
}

package dashboard

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

// TestIncidentsPageAndAPI: the incidents the aggregator derives, written to
// the history in Redis, are listed on /incidents (kind, keys linking to
// their pages, owners, start, end or open, how it ended) and by
// /api/v1/incidents, newest first, keys of any bytes kept.
func TestIncidentsPageAndAPI(t *testing.T) {
	f := newFixture(t, nil)
	now := time.Now()
	at := func(d time.Duration) int64 { return now.Add(-d).UnixNano() }
	bin := "blob:\xff\x01"
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: "export:daily", Owner: "export-worker/pod-2", Lease: "l-f", TS: at(30 * time.Second), TTL: time.Minute, Attempts: 1},
		{Type: event.Forced, Key: "export:daily", Owner: "export-worker/pod-2", Lease: "l-f", TS: at(25 * time.Second), By: "oncall-ana", Reason: "hung"},
		{Type: event.Acquired, Key: bin, Owner: "worker/3", Lease: "l-b", TS: at(20 * time.Second), TTL: 5 * time.Second, Attempts: 1},
		{Type: event.Lost, Key: bin, Owner: "worker/3", Lease: "l-b", TS: at(10 * time.Second), Hold: 10 * time.Second, Reason: event.ReasonNotOwner},
		{Type: event.Acquired, Key: "report:nightly", Owner: "reporter/1", Lease: "l-s", TS: at(10 * time.Minute), TTL: time.Hour, Attempts: 1},
		{Type: event.Renewed, Key: "report:nightly", Owner: "reporter/1", Lease: "l-s", TS: at(time.Second), TTL: time.Hour},
	})
	f.agg.Tick()
	f.flushIncidents(t)

	doc := htmlDoc(t, f.do(t, req{target: "/incidents"}))
	rows := byTestID(doc, "incident-row")
	var kinds []string
	for _, r := range rows {
		kinds = append(kinds, attr(r, "data-kind"))
	}
	// Newest start first: lease lost (the lapse, 15 s ago), forced (25 s),
	// stuck (since 5 minutes past its start, 5 m ago).
	if want := []string{"lease_lost", "forced", "stuck"}; !slices.Equal(kinds, want) {
		t.Fatalf("incident rows = %q, want %q", kinds, want)
	}
	forced := rows[1]
	if k := one(t, forced, "incident-key"); attr(k, "href") != keyPath("export:daily") {
		t.Errorf("forced incident key links to %q, want %q", attr(k, "href"), keyPath("export:daily"))
	}
	if got := text(one(t, forced, "incident-ended-by")); got != "forced" {
		t.Errorf("forced incident ended by %q, want forced", got)
	}
	if got := text(forced); !strings.Contains(got, "by oncall-ana: hung") || !strings.Contains(got, "export-worker/pod-2") {
		t.Errorf("forced incident row = %q, want the operator, reason and owner", got)
	}
	if got := text(one(t, rows[2], "incident-end")); got != "open" {
		t.Errorf("stuck incident end = %q, want open", got)
	}
	if nav := text(doc); !strings.Contains(nav, "Incidents") {
		t.Error("no Incidents link in the page")
	}

	api := decodeJSON[apiIncidents](t, f.do(t, req{target: "/api/v1/incidents"}))
	if len(api.Incidents) != 3 {
		t.Fatalf("API incidents = %+v, want 3", api.Incidents)
	}
	lost := api.Incidents[0]
	if lost.Kind != "lease_lost" || lost.End == nil || lost.EndedBy != "lost" || len(lost.KeysB64) != 1 ||
		lost.KeysB64[0] != base64.StdEncoding.EncodeToString([]byte(bin)) || !slices.Equal(lost.Owners, []string{"worker/3"}) {
		t.Errorf("API lease_lost incident = %+v, want ended by lost, its key's bytes in keys_b64", lost)
	}
	if !lost.Start.Equal(time.Unix(0, at(15*time.Second)).Truncate(time.Millisecond)) {
		t.Errorf("API lease_lost start = %v, want the lapse at %v", lost.Start, time.Unix(0, at(15*time.Second)))
	}
	if st := api.Incidents[2]; st.Kind != "stuck" || st.End != nil || st.EndedBy != "" || !slices.Equal(st.Keys, []string{"report:nightly"}) {
		t.Errorf("API stuck incident = %+v, want open (end null)", st)
	}
	if got := decodeJSON[apiIncidents](t, f.do(t, req{target: "/api/v1/incidents?limit=1"})); len(got.Incidents) != 1 || got.Incidents[0].Kind != "lease_lost" {
		t.Errorf("API ?limit=1 = %+v, want the newest alone", got.Incidents)
	}
	if rec := f.do(t, req{target: "/api/v1/incidents?limit=0"}); rec.Code != http.StatusBadRequest {
		t.Errorf("API ?limit=0 = %d, want 400", rec.Code)
	}
}

// failingLister is a history Redis cannot be read from.
type failingLister struct{}

func (failingLister) List(context.Context, int) ([]state.Incident, error) {
	return nil, errors.New("dial tcp: connection refused")
}

// TestIncidentsUnreadable: an unreadable history is said so: the page tells
// why, the API answers 503.
func TestIncidentsUnreadable(t *testing.T) {
	f := newFixture(t, &Options{Incidents: failingLister{}})
	doc := htmlDoc(t, f.do(t, req{target: "/incidents"}))
	if got := text(one(t, doc, "incidents-error")); !strings.Contains(got, "connection refused") {
		t.Errorf("incidents error = %q, want the reason", got)
	}
	if rec := f.do(t, req{target: "/api/v1/incidents"}); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("API with an unreadable history = %d, want 503", rec.Code)
	}
}

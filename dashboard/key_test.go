package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

func TestKeyDetailPage(t *testing.T) {
	f := newFixture(t, nil)
	key := f.pfx + "report:9"
	f.agg.Apply(contended(key, 12, 30*time.Millisecond, time.Now().Add(-40*time.Second)))
	f.obtain(t, key, "reporter/host/1", time.Minute, false)

	doc := htmlDoc(t, f.do(t, req{target: keyPath(key)}))
	if got := text(one(t, doc, "holder-owner")); got != "reporter/host/1" {
		t.Errorf("holder = %q, want reporter/host/1", got)
	}
	if got := text(one(t, doc, "holder-ttl")); !strings.HasSuffix(got, "s") {
		t.Errorf("TTL = %q, want a duration in seconds", got)
	}
	if n := len(byTestID(doc, "event-row")); n < 10 {
		t.Errorf("event rows = %d, want at least 10", n)
	}
	for _, id := range []string{"wait-dist", "hold-dist", "timeline"} {
		if n := len(byTag(one(t, doc, id), "svg")); n != 1 {
			t.Errorf("%s has %d svg pictures, want 1", id, n)
		}
	}
	if rec := f.do(t, req{target: keyPath(f.pfx + "never-seen")}); rec.Code != 404 {
		t.Errorf("unknown key = %d, want 404", rec.Code)
	}
	if rec := f.do(t, req{target: apiLockPath(f.pfx + "never-seen")}); rec.Code != 404 || decodeJSON[apiError](t, rec).Error == "" {
		t.Errorf("API unknown key = %d, want 404 with a JSON error", rec.Code)
	}
	if rec := f.do(t, req{target: "/api/v1/nope"}); rec.Code != 404 || decodeJSON[apiError](t, rec).Error == "" {
		t.Errorf("API unknown route = %d, want 404 with a JSON error", rec.Code)
	}
	if rec := f.do(t, req{method: "DELETE", target: "/api/v1/overview"}); rec.Code != 405 {
		t.Errorf("DELETE overview = %d, want 405", rec.Code)
	}
}

// TestAPIEventBytesRoundTrip checks that owner, holder and operator names
// that are not valid UTF-8 keep their exact bytes in the key detail JSON.
func TestAPIEventBytesRoundTrip(t *testing.T) {
	f := newFixture(t, nil)
	key := f.pfx + "bytes"
	now := time.Now()
	bad := []string{"own\xff", "hold\xfe\"<", "by\xc3"}
	f.agg.Apply([]event.Event{
		{Type: event.Failed, Key: key, Owner: bad[0], Lease: "l1", TS: now.UnixNano(), Reason: event.ReasonHeld, Holder: bad[1], Attempts: 1},
		{Type: event.Forced, Key: key, Owner: bad[0], Lease: "l0", TS: now.Add(time.Millisecond).UnixNano(), By: bad[2], Reason: "stuck"},
	})
	rec := f.do(t, req{target: "/api/v1/locks/" + url.PathEscape(key)})
	if rec.Code != http.StatusOK {
		t.Fatalf("GET key detail = %d, want 200; body %.300s", rec.Code, rec.Body.String())
	}
	type ev struct {
		Type      string `json:"type"`
		Owner     string `json:"owner"`
		OwnerB64  string `json:"owner_b64"`
		Holder    string `json:"holder"`
		HolderB64 string `json:"holder_b64"`
		By        string `json:"by"`
		ByB64     string `json:"by_b64"`
	}
	v := decodeJSON[struct {
		Recent []ev `json:"recent"`
	}](t, rec)
	got := map[string]string{}
	for _, e := range v.Recent {
		switch e.Type {
		case "failed":
			got["owner"] = jsonKey(t, e.Owner, e.OwnerB64)
			got["holder"] = jsonKey(t, e.Holder, e.HolderB64)
		case "forced":
			got["by"] = jsonKey(t, e.By, e.ByB64)
		}
	}
	want := map[string]string{"owner": bad[0], "holder": bad[1], "by": bad[2]}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("recent event %s = %q, want %q (exact bytes)", k, got[k], w)
		}
	}
}

// A key held for the first time has no finished hold: its hold card says how
// long the current one has lasted rather than "no observations".
func TestHoldCardOfAFirstHold(t *testing.T) {
	f := newFixture(t, nil)
	key := f.pfx + "first:1"
	f.agg.Apply([]event.Event{{Type: event.Acquired, Key: key, Owner: "a", Lease: "l1", TS: time.Now().Add(-90 * time.Second).UnixNano(), TTL: time.Hour, Attempts: 1}})
	doc := htmlDoc(t, f.do(t, req{target: keyPath(key)}))
	if got := text(one(t, doc, "hold-dist-empty")); !strings.Contains(got, "the current one has lasted 1m30s") {
		t.Errorf("hold card = %q, want how long the current hold has lasted", got)
	}
}

// Relative times carry the absolute date and time with its zone on hover,
// and the key page states when the hold began in full.
func TestTimesAreDatedWithTheirZone(t *testing.T) {
	f := newFixture(t, nil)
	key := f.pfx + "dated:1"
	at := time.Date(2026, 3, 1, 9, 30, 15, 250e6, time.UTC)
	f.agg.Apply([]event.Event{{Type: event.Acquired, Key: key, Owner: "a", Lease: "l1", TS: at.UnixNano(), TTL: time.Hour, Attempts: 1}})
	want := "2026-03-01 09:30:15.250 UTC"
	doc := htmlDoc(t, f.do(t, req{target: "/keys?q=" + url.QueryEscape(key)}))
	if got := attr(one(t, doc, "last-event"), "title"); got != want {
		t.Errorf("/keys last event title = %q, want %q", got, want)
	}
	page := f.do(t, req{target: keyPath(key)}).Body.String()
	if !strings.Contains(page, ">"+want+"<") || !strings.Contains(page, `title="`+want+`"`) {
		t.Errorf("key page does not show the hold's start %q in full and on hover", want)
	}
}

// A run of one lease's renewals is one row of the event list, saying how
// many and between when; the acquisition and the release stay in sight.
func TestKeyPageFoldsRenewals(t *testing.T) {
	f := newFixture(t, nil)
	key := f.pfx + "workflow:1001"
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	evs := []event.Event{{Type: event.Acquired, Key: key, Owner: "editor/alice", Lease: "l1", TS: t0.UnixNano(), TTL: 10 * time.Second, Attempts: 1}}
	for i := 1; i <= 14; i++ {
		evs = append(evs, event.Event{Type: event.Renewed, Key: key, Owner: "editor/alice", Lease: "l1", TS: t0.Add(time.Duration(i) * 3 * time.Second).UnixNano(), TTL: 10 * time.Second})
	}
	evs = append(evs, event.Event{Type: event.Released, Key: key, Owner: "editor/alice", Lease: "l1", TS: t0.Add(45 * time.Second).UnixNano(), Hold: 45 * time.Second})
	f.agg.Apply(evs)
	doc := htmlDoc(t, f.do(t, req{target: keyPath(key)}))
	var got []string
	for _, row := range byTestID(doc, "event-row") {
		got = append(got, strings.Join(strings.Fields(text(row)), " "))
	}
	clock := func(d time.Duration) string { return fmtClock(t0.Add(d)) }
	if len(got) != 3 || !strings.Contains(got[0], "released") || !strings.Contains(got[2], "acquired") ||
		!strings.Contains(got[1], "renewed ×14") || !strings.Contains(got[1], "14 renewals between "+clock(3*time.Second)+" and "+clock(42*time.Second)) {
		t.Errorf("event rows = %q, want released, \"renewed ×14 … 14 renewals between %s and %s\", acquired", got, clock(3*time.Second), clock(42*time.Second))
	}
}

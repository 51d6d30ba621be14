package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

var operatorCreds = [2]string{testUser, testPass}

// listening obtains key as owner and makes the hold listen, waiting until
// Redis has its subscription.
func (f *fixture) listening(t *testing.T, key, owner string) (*lock.Lease, <-chan lock.ReleaseRequest) {
	t.Helper()
	l := f.obtain(t, key, owner, 30*time.Second, false)
	asks := l.ReleaseRequested()
	f.waitListeners(t, key, 1)
	return l, asks
}

func (f *fixture) waitListeners(t *testing.T, key string, n int64) {
	t.Helper()
	redistest.WaitFor(t, 15*time.Second, "the holder's subscription", func() bool {
		h, err := f.lc.Inspect(context.Background(), key)
		if err != nil {
			return false
		}
		got, err := f.lc.Listeners(context.Background(), h)
		return err == nil && got == n
	})
}

func heard(t *testing.T, asks <-chan lock.ReleaseRequest) lock.ReleaseRequest {
	t.Helper()
	select {
	case r := <-asks:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("the holder heard no release request")
	}
	return lock.ReleaseRequest{}
}

// TestAskFromTheKeyPage: an operator asks a holder that listens from its
// key page; the holder hears who asked, why and the grace, within the
// TTL; it releases, and the key's events and the incident history tell the
// request and its answer.
func TestAskFromTheKeyPage(t *testing.T) {
	f := newFixture(t, operatorOptions())
	key := f.pfx + "workflow:42"
	l, asks := f.listening(t, key, "editor/carol")

	doc := htmlDoc(t, f.do(t, req{target: keyPath(key), basic: operatorCreds}))
	link := one(t, doc, "ask-link")
	if got := attr(link, "href"); got != askPath(key) {
		t.Fatalf("ask link = %q, want %q", got, askPath(key))
	}
	one(t, doc, "release-link") // beside the forced release
	if n := len(byTestID(doc, "ask-cannot")); n != 0 {
		t.Errorf("a listening holder is shown as one that cannot be asked")
	}

	doc = htmlDoc(t, f.do(t, req{target: askPath(key), basic: operatorCreds}))
	form := one(t, doc, "ask-form")
	var fp string
	for _, in := range byTag(form, "input") {
		if attr(in, "name") == "fingerprint" {
			fp = attr(in, "value")
		}
	}
	if want := f.fingerprint(t, key); fp != want {
		t.Fatalf("the confirmation's fingerprint = %q, want the holder's %q", fp, want)
	}
	sent := time.Now()
	rec := f.do(t, req{method: "POST", target: askPath(key), basic: operatorCreds,
		form: url.Values{"fingerprint": {fp}, "reason": {"I need to edit the workflow"}, "grace": {"30s"}}})
	if rec.Code != http.StatusOK {
		t.Fatalf("POST ask = %d, want 200; body %.300s", rec.Code, rec.Body.String())
	}
	res := one(t, htmlDoc(t, rec), "ask-result")
	if got := attr(res, "data-outcome"); got != "asked" {
		t.Errorf("outcome = %q, want asked", got)
	}
	r := heard(t, asks)
	if took := time.Since(sent); took >= 30*time.Second {
		t.Errorf("heard after %v, want within the 30s TTL", took)
	}
	if r.Operator != testUser || r.Reason != "I need to edit the workflow" || r.Grace != 30*time.Second {
		t.Errorf("request heard = %+v, want alice's, with the reason and a 30s grace", r)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}

	d, _ := f.agg.Lock(key)
	rows := (&server{}).eventRowsOf(d.Recent, time.Now())
	var detail string
	for _, row := range rows {
		if row.Type == "requested" {
			detail = row.Detail
		}
	}
	if want := "asked by alice · grace 30s · heard by 1 listener · reason: I need to edit the workflow"; detail != want {
		t.Errorf("requested event row = %q, want %q", detail, want)
	}
	tl := newTimeline(d.Recent, time.Now(), nil, nil)
	var tip string
	for _, m := range tl.Marks {
		if m.Type == "requested" {
			tip = m.Tip
		}
	}
	if !strings.Contains(tip, "grace 30s · heard by 1 listener") || !strings.Contains(tip, "by alice") {
		t.Errorf("timeline mark of the request = %q, want its grace, listeners and operator", tip)
	}

	f.flushIncidents(t)
	doc = htmlDoc(t, f.do(t, req{target: "/incidents"}))
	var found string
	for _, row := range byTestID(doc, "incident-row") {
		if attr(row, "data-kind") == string(state.IncidentReleaseRequest) {
			found = text(row)
			if got := text(one(t, row, "incident-ended-by")); got != "released" {
				t.Errorf("release_request ended by %q, want released", got)
			}
		}
	}
	if !strings.Contains(found, "asked at ") || !strings.Contains(found, ", released at ") {
		t.Errorf("incident row = %q, want \"asked at …, released at …\"", found)
	}
}

// TestAskAPI: POST /api/v1/locks/{key}/ask asks only the holder whose
// fingerprint it quotes, and only for an authenticated operator from the
// dashboard's own origin; nothing refused reaches any holder.
func TestAskAPI(t *testing.T) {
	f := newFixture(t, operatorOptions())
	key := f.pfx + "doc:7"
	first := f.obtain(t, key, "editor/old", 30*time.Second, false)
	first.ReleaseRequested()
	f.waitListeners(t, key, 1)
	seen := f.fingerprint(t, key)
	first.Release(context.Background())
	_, asks := f.listening(t, key, "editor/new")
	now := f.fingerprint(t, key)
	body := map[string]any{"fingerprint": seen, "reason": "stale page"}

	rec := f.do(t, req{method: "POST", target: apiLockPath(key) + "/ask", bearer: testToken, json: body})
	if rec.Code != http.StatusConflict {
		t.Fatalf("ask with the previous holder's fingerprint = %d, want 409; body %.300s", rec.Code, rec.Body.String())
	}
	if got := decodeJSON[apiAskResult](t, rec); got.Asked || got.Outcome != "owner_changed" || got.Holder == nil || got.Holder.Owner != "editor/new" {
		t.Errorf("owner-changed answer = %+v, want not asked, owner_changed, the holder now", got)
	}
	body["fingerprint"] = now
	for _, c := range []struct {
		name string
		r    req
		want int
	}{
		{"anonymous", req{method: "POST", target: apiLockPath(key) + "/ask", json: body}, http.StatusUnauthorized},
		{"wrong token", req{method: "POST", target: apiLockPath(key) + "/ask", bearer: "nope", json: body}, http.StatusUnauthorized},
		{"cross-origin", req{method: "POST", target: apiLockPath(key) + "/ask", bearer: testToken, json: body, hdr: map[string]string{"Origin": "https://evil.example"}}, http.StatusForbidden},
		{"cross-site page", req{method: "POST", target: askPath(key), basic: operatorCreds, form: url.Values{"fingerprint": {now}, "reason": {"csrf"}}, hdr: map[string]string{"Sec-Fetch-Site": "cross-site"}}, http.StatusForbidden},
		{"anonymous page", req{method: "POST", target: askPath(key), form: url.Values{"fingerprint": {now}, "reason": {"r"}}}, http.StatusUnauthorized},
		{"no reason", req{method: "POST", target: apiLockPath(key) + "/ask", bearer: testToken, json: map[string]any{"fingerprint": now}}, http.StatusUnprocessableEntity},
		{"negative grace", req{method: "POST", target: apiLockPath(key) + "/ask", bearer: testToken, json: map[string]any{"fingerprint": now, "reason": "r", "grace_seconds": -1}}, http.StatusUnprocessableEntity},
		{"unknown field", req{method: "POST", target: apiLockPath(key) + "/ask", bearer: testToken, json: map[string]any{"fingerprint": now, "reason": "r", "force": true}}, http.StatusBadRequest},
		{"free key", req{method: "POST", target: apiLockPath(f.pfx+"free") + "/ask", bearer: testToken, json: body}, http.StatusNotFound},
	} {
		if rec := f.do(t, c.r); rec.Code != c.want {
			t.Errorf("%s: POST = %d, want %d; body %.200s", c.name, rec.Code, c.want, rec.Body.String())
		}
	}
	// Requests arrive in order on the holder's connection: had any refused
	// one been sent, it would be heard before this one.
	rec = f.do(t, req{method: "POST", target: apiLockPath(key) + "/ask", bearer: testToken,
		json: map[string]any{"fingerprint": now, "reason": "marker", "grace_seconds": 1.5}})
	if rec.Code != http.StatusOK {
		t.Fatalf("ask = %d, want 200; body %.300s", rec.Code, rec.Body.String())
	}
	got := decodeJSON[apiAskResult](t, rec)
	if !got.Asked || !got.Heard || got.Listeners != 1 || got.By != "ci-bot" || got.GraceSeconds != 1.5 || got.Outcome != "asked" {
		t.Errorf("ask answer = %+v, want asked and heard by 1, by ci-bot, grace 1.5", got)
	}
	if r := heard(t, asks); r.Reason != "marker" || r.Grace != 1500*time.Millisecond {
		t.Errorf("the new holder first heard %+v, want only the marker request", r)
	}
}

// TestAskHoldersThatCannotHear: another library's lock and a lockscope
// holder that does not listen are told apart on the key page, not offered
// the confirmation, and never reported as asked.
func TestAskHoldersThatCannotHear(t *testing.T) {
	f := newFixture(t, operatorOptions())
	foreign := f.pfx + "redsync:1"
	if err := f.rdb.Set(context.Background(), foreign, "k3yb9Xq2Lm0Zp7Rt5Vw1Yg==", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	deaf := f.pfx + "old:1"
	f.obtain(t, deaf, "old-library/app", 30*time.Second, false)
	for _, c := range []struct{ key, why string }{
		{foreign, "another library's lock (redsync"},
		{deaf, "does not listen for release requests"},
	} {
		doc := htmlDoc(t, f.do(t, req{target: keyPath(c.key), basic: operatorCreds}))
		if n := len(byTestID(doc, "ask-link")); n != 0 {
			t.Errorf("%s: an ask link is offered for a holder that cannot hear", c.key)
		}
		if b := one(t, doc, "ask-cannot"); !hasAttr(b, "disabled") {
			t.Errorf("%s: the cannot-be-asked button is not disabled", c.key)
		}
		if got := text(one(t, doc, "ask-cannot-why")); !strings.Contains(got, "cannot be asked") || !strings.Contains(got, c.why) {
			t.Errorf("%s: why = %q, want it to say %q", c.key, got, c.why)
		}
		one(t, doc, "release-link") // forcing stays possible
		if rec := f.do(t, req{target: askPath(c.key), basic: operatorCreds}); rec.Code != http.StatusConflict {
			t.Errorf("%s: GET ask confirmation = %d, want 409", c.key, rec.Code)
		}
	}
	fp := f.fingerprint(t, foreign)
	rec := f.do(t, req{method: "POST", target: apiLockPath(foreign) + "/ask", bearer: testToken, json: map[string]any{"fingerprint": fp, "reason": "r"}})
	if got := decodeJSON[apiAskResult](t, rec); rec.Code != http.StatusConflict || got.Asked || got.Outcome != "cannot_hear" {
		t.Errorf("ask a redsync lock = %d %+v, want 409 cannot_hear, not asked", rec.Code, got)
	}
	rec = f.do(t, req{method: "POST", target: apiLockPath(deaf) + "/ask", bearer: testToken, json: map[string]any{"fingerprint": f.fingerprint(t, deaf), "reason": "r"}})
	if got := decodeJSON[apiAskResult](t, rec); rec.Code != http.StatusOK || !got.Asked || got.Heard || got.Listeners != 0 || got.Outcome != "unheard" || got.Error == "" {
		t.Errorf("ask a holder that does not listen = %d %+v, want on the record but not heard, and said so", rec.Code, got)
	}
	d, _ := f.agg.Lock(deaf)
	var unheard bool
	for _, e := range d.Recent {
		unheard = unheard || e.Type == event.Requested && e.Count == 0
	}
	if !unheard {
		t.Errorf("the unheard request is not in the key's recent events: %+v", d.Recent)
	}
}

// TestOwnerAskAll: the owner page's "ask all" asks each listed holder that
// listens, by the release-all's rule: a key that changed hands since the
// page was loaded is skipped and its new holder not asked, and a holder
// that does not listen is skipped and reported.
func TestOwnerAskAll(t *testing.T) {
	f := newFixture(t, operatorOptions())
	owner := "batch/7"
	k1, k2, k3 := f.pfx+"job:1", f.pfx+"job:2", f.pfx+"job:3"
	_, asks1 := f.listening(t, k1, owner)
	l2, _ := f.listening(t, k2, owner)
	f.obtain(t, k3, owner, 30*time.Second, false) // does not listen

	doc := htmlDoc(t, f.do(t, req{target: ownerPath(owner), basic: operatorCreds}))
	if got := text(one(t, doc, "confirm-ask-all")); got != "Ask all 2 to release" {
		t.Errorf("ask-all button = %q, want \"Ask all 2 to release\"", got)
	}
	if got := text(one(t, doc, "owner-askable")); !strings.HasPrefix(got, "2 of 3 listed holders listen") {
		t.Errorf("askable note = %q", got)
	}
	if got := attr(one(t, doc, "confirm-ask-all"), "formaction"); got != ownerAskPath(owner) {
		t.Errorf("ask-all formaction = %q, want %q", got, ownerAskPath(owner))
	}
	_, fields := ownerForm(t, f, owner)

	// job:2 changes hands (same owner name, a newer hold) before the POST.
	l2.Release(context.Background())
	_, asks2b := f.listening(t, k2, owner)

	rec := f.do(t, req{method: "POST", target: ownerAskPath(owner), basic: operatorCreds, form: url.Values{"lock": fields, "reason": {"draining batch/7"}}})
	if rec.Code != http.StatusOK {
		t.Fatalf("POST ask all = %d; body %.300s", rec.Code, rec.Body.String())
	}
	doc = htmlDoc(t, rec)
	outcomes := map[string]string{}
	for _, row := range byTestID(doc, "owner-result-row") {
		outcomes[text(one(t, row, "owner-result-key"))] = attr(row, "data-outcome")
	}
	want := map[string]string{k1: "asked", k2: "changed", k3: "cannot"}
	for k, o := range want {
		if outcomes[k] != o {
			t.Errorf("ask all: %s = %q, want %q (all: %v)", k, outcomes[k], o, outcomes)
		}
	}
	if got := text(one(t, doc, "owner-summary")); !strings.HasPrefix(got, "1 asked, 1 skipped (cannot be asked), 1 skipped (holder changed)") {
		t.Errorf("summary = %q", got)
	}
	if r := heard(t, asks1); r.Reason != "draining batch/7" || r.Operator != testUser {
		t.Errorf("job:1 heard %+v", r)
	}
	// The newer hold of job:2 was not asked: a request sent to it now is
	// the first it hears.
	if _, n, err := f.lc.RequestRelease(context.Background(), k2, f.fingerprint(t, k2), lock.ReleaseRequest{Operator: "marker"}); err != nil || n != 1 {
		t.Fatalf("marker request = %d, %v", n, err)
	}
	if r := heard(t, asks2b); r.Operator != "marker" {
		t.Errorf("job:2's newer hold first heard %+v, want only the marker", r)
	}
}

// TestRequestSummary: the incident history's line for each answer.
func TestRequestSummary(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 2, 0, 0, time.Local)
	for _, c := range []struct {
		in   state.Incident
		want string
	}{
		{state.Incident{Start: t0, End: t0.Add(4 * time.Second), EndedBy: "released"}, "asked at 03:02:00.000, released at 03:02:04.000"},
		{state.Incident{Start: t0, End: t0.Add(30 * time.Second), EndedBy: "forced"}, "asked at 03:02:00.000, no answer in 30s, forced at 03:02:30.000"},
		{state.Incident{Start: t0, End: t0.Add(5 * time.Minute), EndedBy: "ignored"}, "asked at 03:02:00.000, no answer: ignored at 03:07:00.000"},
		{state.Incident{Start: t0}, "asked at 03:02:00.000, no answer yet (12s)"},
	} {
		if got := requestSummary(c.in, t0.Add(12*time.Second)); got != c.want {
			t.Errorf("requestSummary(%s) = %q, want %q", c.in.EndedBy, got, c.want)
		}
	}
}

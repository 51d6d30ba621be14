package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/lock"
)

// ownerForm is the release-all form of an owner page: its action and the
// hidden lock fields.
func ownerForm(t *testing.T, f *fixture, owner string) (action string, locks []string) {
	t.Helper()
	rec := f.do(t, req{target: ownerPath(owner), basic: [2]string{testUser, testPass}})
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s as operator = %d; body %.300s", ownerPath(owner), rec.Code, rec.Body.String())
	}
	form := one(t, htmlDoc(t, rec), "owner-release-form")
	for _, in := range byTag(form, "input") {
		if attr(in, "name") == "lock" {
			locks = append(locks, attr(in, "value"))
		}
	}
	return attr(form, "action"), locks
}

// The owner page lists what one owner holds; viewers see the list and no
// form (nor fingerprints), operators a release-all form whose hidden fields
// carry each holder's fingerprint as Redis has it now.
func TestOwnerPageOperatorAndViewer(t *testing.T) {
	f := newFixture(t, operatorOptions())
	owner := "billing/pod-7 \"x\"\n"
	keys := []string{f.pfx + "invoice:1", f.pfx + "invoice:2", f.pfx + "odd\xff/key"}
	for _, k := range keys {
		f.obtain(t, k, owner, time.Minute, false)
	}
	f.obtain(t, f.pfx+"invoice:3", "billing/pod-8", time.Minute, false)
	f.obtain(t, f.pfx+"invoice:4", owner+"0", time.Minute, false)

	// Viewer: the list, no form, no fingerprint.
	rec := f.do(t, req{target: ownerPath(owner)})
	if rec.Code != http.StatusOK {
		t.Fatalf("GET owner page as viewer = %d; body %.300s", rec.Code, rec.Body.String())
	}
	doc := htmlDoc(t, rec)
	var got []string
	for _, a := range byTestID(doc, "owner-key") {
		k, err := url.PathUnescape(strings.TrimPrefix(attr(a, "href"), "/keys/"))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
	}
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(got, want) {
		t.Errorf("owner page keys = %q, want %q", got, want)
	}
	if got := text(one(t, doc, "owner-name")); got != `billing/pod-7 "x"\n` {
		t.Errorf("owner name shown = %q, want it escaped", got)
	}
	if got := text(one(t, doc, "owner-count")); !strings.HasPrefix(got, "3 locks") {
		t.Errorf("owner count = %q, want 3 locks", got)
	}
	if n := len(byTestID(doc, "owner-release-form")) + len(byTestID(doc, "owner-row-fingerprint")); n != 0 {
		t.Errorf("viewer sees %d release forms or fingerprints, want none", n)
	}
	for _, k := range keys {
		if fp := f.fingerprint(t, k); strings.Contains(rec.Body.String(), fp[:12]) {
			t.Errorf("viewer's owner page shows the fingerprint of %q", k)
		}
	}

	// Viewer POST: refused, nothing released.
	rec = f.do(t, req{method: "POST", target: ownerReleasePath(owner), form: url.Values{"reason": {"x"}}})
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("POST release-all without credentials = %d, want 401", rec.Code)
	}

	// Operator: the form, one field per key with its fingerprint now.
	action, fields := ownerForm(t, f, owner)
	if action != ownerReleasePath(owner) {
		t.Errorf("form action = %q, want %q", action, ownerReleasePath(owner))
	}
	var wantFields []string
	for _, k := range want {
		wantFields = append(wantFields, f.fingerprint(t, k)+" "+url.PathEscape(k))
	}
	for i := range wantFields {
		wantFields[i] = strings.ReplaceAll(wantFields[i], ".", "%2E")
	}
	if !slices.Equal(fields, wantFields) {
		t.Errorf("hidden lock fields = %q, want %q", fields, wantFields)
	}
	doc = htmlDoc(t, f.do(t, req{target: ownerPath(owner), basic: [2]string{testUser, testPass}}))
	if got := text(one(t, doc, "confirm-release-all")); got != "Release all 3 locks" {
		t.Errorf("release button = %q, want Release all 3 locks", got)
	}

	// The JSON mirror lists the same keys.
	api := decodeJSON[apiOwner](t, f.do(t, req{target: "/api/v1/owners/" + url.PathEscape(owner)}))
	if api.Owner != owner || api.Total != 3 || len(api.Locks) != 3 || api.Locks[0].Key != want[0] || api.Locks[0].Since == nil || api.Locks[0].TTLSeconds != 60 {
		t.Errorf("GET /api/v1/owners = %+v, want owner's 3 locks with since and a 60 s TTL", api)
	}
	// The owner is linked from the key page and /keys.
	for _, target := range []string{keyPath(keys[0]), "/keys?q=" + url.QueryEscape(f.pfx+"invoice:1")} {
		doc := htmlDoc(t, f.do(t, req{target: target}))
		links := byTestID(doc, "owner-link")
		if len(links) == 0 || attr(links[0], "href") != ownerPath(owner) {
			t.Errorf("%s: owner links %d, want the first to %s", target, len(links), ownerPath(owner))
		}
	}
}

// A release-all releases what the page showed: a key whose holder changed
// since is skipped, one that was freed is reported free, the rest are
// released as forced events, which make one forced incident.
func TestOwnerReleaseAllSkipsChangedHolder(t *testing.T) {
	f := newFixture(t, operatorOptions())
	const owner = "export/pod-3"
	k1, k2, k3, k4 := f.pfx+"export:1", f.pfx+"export:2", f.pfx+"export:3", f.pfx+"export:4"
	leases := map[string]*lock.Lease{}
	for _, k := range []string{k1, k2, k3, k4} {
		leases[k] = f.obtain(t, k, owner, time.Minute, false)
	}
	other := f.obtain(t, f.pfx+"export:9", "export/pod-4", time.Minute, false)
	action, fields := ownerForm(t, f, owner)
	if len(fields) != 4 {
		t.Fatalf("form fields = %q, want 4", fields)
	}

	// Between the page and the POST: k2 changes hands, k3 is released.
	if err := leases[k2].Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.obtain(t, k2, "export/pod-5", time.Minute, false)
	successor := f.fingerprint(t, k2)
	if err := leases[k3].Release(context.Background()); err != nil {
		t.Fatal(err)
	}

	// A reason is required; nothing is released without one.
	rec := f.do(t, req{method: "POST", target: action, basic: [2]string{testUser, testPass}, form: url.Values{"lock": fields, "reason": {"  "}}})
	if rec.Code != http.StatusUnprocessableEntity || len(byTestID(htmlDoc(t, rec), "form-error")) != 1 {
		t.Errorf("POST release-all without a reason = %d, want 422 with the form error", rec.Code)
	}
	// A damaged field: refused as a whole.
	rec = f.do(t, req{method: "POST", target: action, basic: [2]string{testUser, testPass}, form: url.Values{"lock": {"nothex " + k1}, "reason": {"r"}}})
	if rec.Code != http.StatusUnprocessableEntity {
		t.Errorf("POST release-all with a damaged field = %d, want 422", rec.Code)
	}
	if _, err := f.lc.Inspect(context.Background(), k1); err != nil {
		t.Fatalf("after refused posts Inspect(%q) = %v, want still held", k1, err)
	}

	rec = f.do(t, req{method: "POST", target: action, basic: [2]string{testUser, testPass}, form: url.Values{"lock": fields, "reason": {"pod-3 evicted, INC-9"}}})
	if rec.Code != http.StatusOK {
		t.Fatalf("POST release-all = %d; body %.400s", rec.Code, rec.Body.String())
	}
	doc := htmlDoc(t, rec)
	outcomes := map[string]string{}
	for _, row := range byTestID(doc, "owner-result-row") {
		k, _ := url.PathUnescape(strings.TrimPrefix(attr(one(t, row, "owner-result-key"), "href"), "/keys/"))
		outcomes[k] = attr(row, "data-outcome")
	}
	wantOut := map[string]string{k1: "released", k2: "changed", k3: "free", k4: "released"}
	if len(outcomes) != len(wantOut) {
		t.Errorf("results = %v, want %v", outcomes, wantOut)
	}
	for k, w := range wantOut {
		if outcomes[k] != w {
			t.Errorf("result of %q = %q, want %q", k, outcomes[k], w)
		}
	}
	if got := text(one(t, doc, "owner-summary")); got != "2 released, 1 skipped (holder changed), 1 skipped (already free); recorded as forced by alice: pod-3 evicted, INC-9" {
		t.Errorf("summary = %q", got)
	}
	ctx := context.Background()
	for _, k := range []string{k1, k4} {
		if _, err := f.lc.Inspect(ctx, k); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("after release-all Inspect(%q) = %v, want ErrNotHeld", k, err)
		}
	}
	if got := f.fingerprint(t, k2); got != successor {
		t.Errorf("k2 fingerprint = %s, want the successor's %s untouched", got, successor)
	}
	if h, err := f.lc.Inspect(ctx, f.pfx+"export:9"); err != nil || h.Owner != "export/pod-4" {
		t.Errorf("another owner's lock: Inspect = %+v, %v; want untouched", h, err)
	}
	_ = other

	// The forced releases: counted, in the audit log, and one incident.
	if !strings.Contains(f.logs.String(), "forced release of an owner's locks") || strings.Count(f.logs.String(), `msg="lockscope: forced release"`) != 2 {
		t.Errorf("audit log: want two forced releases and the bulk line:\n%s", f.logs.String())
	}
	f.flushIncidents(t)
	ins, err := f.incidents.List(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	var forced []state.Incident
	for _, in := range ins {
		if in.Kind == state.IncidentForced {
			forced = append(forced, in)
		}
	}
	if len(forced) != 1 {
		t.Fatalf("forced incidents = %+v, want one for the bulk release", forced)
	}
	if got := slices.Sorted(slices.Values(forced[0].Keys)); !slices.Equal(got, []string{k1, k4}) || !slices.Equal(forced[0].Owners, []string{owner}) ||
		!strings.Contains(forced[0].Detail, "alice") || !strings.Contains(forced[0].Detail, "pod-3 evicted") {
		t.Errorf("forced incident = %+v, want keys %q of %s by alice with the reason", forced[0], []string{k1, k4}, owner)
	}

	// The page now: k2 is not the owner's any more; nothing left to release.
	doc = htmlDoc(t, f.do(t, req{target: ownerPath(owner), basic: [2]string{testUser, testPass}}))
	if n := len(byTestID(doc, "owner-row")); n != 0 || len(byTestID(doc, "owner-release-form")) != 0 {
		t.Errorf("owner page after release-all: %d rows and %d forms, want none", n, len(byTestID(doc, "owner-release-form")))
	}
}

// The release-all POST is a state change: a cross-site request is refused
// before anything is released, and a read-only dashboard has no form.
func TestOwnerReleaseAllCrossOriginAndReadOnly(t *testing.T) {
	f := newFixture(t, operatorOptions())
	const owner = "cron/pod-1"
	k := f.pfx + "cron:nightly"
	f.obtain(t, k, owner, time.Minute, false)
	action, fields := ownerForm(t, f, owner)
	for _, hdr := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}} {
		rec := f.do(t, req{method: "POST", target: action, basic: [2]string{testUser, testPass}, hdr: hdr,
			form: url.Values{"lock": fields, "reason": {"csrf"}}})
		if rec.Code != http.StatusForbidden {
			t.Errorf("cross-origin POST release-all (%v) = %d, want 403", hdr, rec.Code)
		}
	}
	if _, err := f.lc.Inspect(context.Background(), k); err != nil {
		t.Fatalf("after refused cross-origin posts Inspect(%q) = %v, want still held", k, err)
	}

	ro := newFixture(t, nil)
	ro.obtain(t, ro.pfx+"cron:nightly", owner, time.Minute, false)
	doc := htmlDoc(t, ro.do(t, req{target: ownerPath(owner)}))
	if len(byTestID(doc, "owner-row")) != 1 || len(byTestID(doc, "owner-release-form")) != 0 {
		t.Errorf("read-only owner page: want one row and no form")
	}
	if rec := ro.do(t, req{method: "POST", target: ownerReleasePath(owner), form: url.Values{"reason": {"x"}}}); rec.Code != http.StatusForbidden {
		t.Errorf("POST release-all on a read-only dashboard = %d, want 403", rec.Code)
	}
}

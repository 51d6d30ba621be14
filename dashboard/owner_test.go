package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
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

// ownerRowStates is each key's row state on owner's page, as an operator
// sees it ("" for a releasable row), and the form's hidden fields.
func ownerRowStates(t *testing.T, f *fixture, owner string) (map[string]string, []string) {
	t.Helper()
	doc := htmlDoc(t, f.do(t, req{target: ownerPath(owner), basic: [2]string{testUser, testPass}}))
	states := map[string]string{}
	for _, row := range byTestID(doc, "owner-row") {
		k, _ := url.PathUnescape(strings.TrimPrefix(attr(one(t, row, "owner-key"), "href"), "/keys/"))
		states[k] = attr(row, "data-state")
	}
	var fields []string
	for _, form := range byTestID(doc, "owner-release-form") {
		for _, in := range byTag(form, "input") {
			if attr(in, "name") == "lock" {
				fields = append(fields, attr(in, "value"))
			}
		}
	}
	return states, fields
}

// An owner page releases only the holder it names: Redis's value must name
// the page's owner (and the hold's lease, where the collector knows it).
// The collector's word alone is not enough: it may be a moment stale or a
// stream writer's forgery. Neither the page nor a hand-made form (another
// fingerprint, "@any") may remove another holder's live lock.
func TestOwnerReleaseOnlyTheNamedHolder(t *testing.T) {
	f := newFixture(t, operatorOptions())
	ctx := context.Background()
	now := time.Now()
	post := func(owner string, fields ...string) *httptest.ResponseRecorder {
		return f.do(t, req{method: "POST", target: ownerReleasePath(owner), basic: [2]string{testUser, testPass},
			form: url.Values{"lock": fields, "reason": {"test"}}})
	}
	outcomes := func(rec *httptest.ResponseRecorder) map[string]string {
		out := map[string]string{}
		for _, row := range byTestID(htmlDoc(t, rec), "owner-result-row") {
			k, _ := url.PathUnescape(strings.TrimPrefix(attr(one(t, row, "owner-result-key"), "href"), "/keys/"))
			out[k] = attr(row, "data-outcome")
		}
		return out
	}
	field := func(fp, key string) string { return fp + " " + url.PathEscape(key) }

	// 1. A forged acquired event names a dead pod as the holder of a key
	// another service holds with another library's token.
	pay := f.pfx + "lock:pay"
	token := "9f1c2a7be04d4c3f8a6b5d2e1f0c9b8a" // node-redlock's shape
	if err := f.rdb.Set(ctx, pay, token, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	f.agg.Apply([]event.Event{{Type: event.Acquired, Key: pay, Owner: "pod-dead", Lease: "forged", TS: now.UnixNano(), TTL: time.Minute}})
	states, fields := ownerRowStates(t, f, "pod-dead")
	if states[pay] != "changed" || len(fields) != 0 {
		t.Errorf("forged holder's page: row state %q and form fields %q, want changed and none", states[pay], fields)
	}
	fp := lock.Fingerprint(token)
	if got := outcomes(post("pod-dead", field(fp, pay)))[pay]; got != "changed" {
		t.Errorf("hand-made release of another library's live lock from a forged owner's page = %q, want changed", got)
	}
	if rec := post("pod-dead", field(fp+"@any", pay)); rec.Code != http.StatusUnprocessableEntity {
		t.Errorf("hand-made @any field = %d, want 422", rec.Code)
	}
	if got, err := f.rdb.Get(ctx, pay).Result(); err != nil || got != token {
		t.Fatalf("live lock after the forged owner's releases = %q, %v; want %q untouched", got, err, token)
	}

	// 2. A passive holder (named by its token, as the watcher names it)
	// gave the key up and another took it before the collector heard.
	inv := f.pfx + "lock:inventory"
	tokA, tokB := "00112233445566778899aabbccddeeff", "ffeeddccbbaa99887766554433221100"
	ownerA := lock.ForeignOwner(tokA)
	if err := f.rdb.Set(ctx, inv, tokA, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	f.agg.Apply([]event.Event{{Type: event.Acquired, Key: inv, Owner: ownerA, TS: now.UnixNano(), TTL: time.Minute, Passive: true}})
	states, fields = ownerRowStates(t, f, ownerA)
	if states[inv] != "" || !slices.Equal(fields, []string{field(lock.Fingerprint(tokA), inv)}) {
		t.Errorf("passive holder's page while it holds: state %q, fields %q; want releasable", states[inv], fields)
	}
	if err := f.rdb.Set(ctx, inv, tokB, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	states, fields = ownerRowStates(t, f, ownerA)
	if states[inv] != "changed" || len(fields) != 0 {
		t.Errorf("passive holder's page after a successor took the key: state %q, fields %q; want changed and none", states[inv], fields)
	}
	for _, fp := range []string{lock.Fingerprint(tokA), lock.Fingerprint(tokB)} {
		if got := outcomes(post(ownerA, field(fp, inv)))[inv]; got != "changed" {
			t.Errorf("release-all of %s with fingerprint %.12s after the key changed hands = %q, want changed", ownerA, fp, got)
		}
	}
	if got, _ := f.rdb.Get(ctx, inv).Result(); got != tokB {
		t.Fatalf("successor's lock = %q, want %q untouched", got, tokB)
	}

	// 3. The same owner took the key again without the collector hearing:
	// the newer hold is not the one listed.
	job := f.pfx + "lock:job"
	l1 := f.obtain(t, job, "cron/pod-1", time.Minute, false)
	if err := f.rdb.Del(ctx, job).Err(); err != nil { // gone without an event
		t.Fatal(err)
	}
	quiet := lock.New(f.rdb, nil)
	l2, err := quiet.Obtain(ctx, job, time.Minute, &lock.ObtainOptions{Owner: "cron/pod-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l2.Release(context.Background()) })
	states, _ = ownerRowStates(t, f, "cron/pod-1")
	if states[job] != "changed" {
		t.Errorf("the owner's newer hold (lease %s, collector lists %s): state %q, want changed", l2.ID(), l1.ID(), states[job])
	}
	if got := outcomes(post("cron/pod-1", field(f.fingerprint(t, job), job)))[job]; got != "changed" {
		t.Errorf("release-all of the owner's newer hold = %q, want changed", got)
	}
	if _, err := quiet.Inspect(ctx, job); err != nil {
		t.Errorf("newer hold after release-all: Inspect = %v, want still held", err)
	}

	// 4. A key of another owner's page, posted to this owner's form.
	other := f.pfx + "lock:other"
	f.obtain(t, other, "billing/pod-9", time.Minute, false)
	if got := outcomes(post("cron/pod-1", field(f.fingerprint(t, other), other)))[other]; got != "changed" {
		t.Errorf("another owner's key posted to this owner's form = %q, want changed", got)
	}
	if _, err := f.lc.Inspect(ctx, other); err != nil {
		t.Errorf("another owner's lock: Inspect = %v, want still held", err)
	}
}

package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/keytext"
)

func TestAuth(t *testing.T) {
	ro := newFixture(t, nil)
	op := newFixture(t, operatorOptions())
	strict := newFixture(t, &Options{Token: testToken, RequireAuthForRead: true, Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("lockscope_up 1\n"))
	})})

	// A held lock per fixture, so a successful release has something to do.
	roKey, opKey, opKey2 := ro.pfx+"ro", op.pfx+"op", op.pfx+"op2"
	ro.obtain(t, roKey, "w", time.Minute, false)
	op.obtain(t, opKey, "w", time.Minute, false)
	op.obtain(t, opKey2, "w", time.Minute, false)
	release := func(f *fixture, key string) url.Values {
		return url.Values{"fingerprint": {f.fingerprint(t, key)}, "reason": {"test"}}
	}

	for _, c := range []struct {
		name       string
		f          *fixture
		r          req
		want       int
		wantBody   string // substring
		wantHeader string // WWW-Authenticate substring
	}{
		{name: "read-only overview open", f: ro, r: req{target: "/"}, want: 200, wantBody: `data-testid="readonly-banner"`},
		{name: "read-only refuses page release", f: ro, r: req{method: "POST", target: keyPath(roKey) + "/release", form: release(ro, roKey)}, want: 403, wantBody: "read-only"},
		{name: "read-only refuses release even with credentials", f: ro, r: req{method: "POST", target: keyPath(roKey) + "/release", form: release(ro, roKey), basic: [2]string{testUser, testPass}}, want: 403},
		{name: "read-only refuses API release", f: ro, r: req{method: "POST", target: apiLockPath(roKey) + "/release", json: map[string]string{"fingerprint": "00", "reason": "x"}}, want: 403, wantBody: `"error"`},
		{name: "read-only refuses confirmation", f: ro, r: req{target: releasePath(roKey)}, want: 403},
		{name: "operator overview open without credentials", f: op, r: req{target: "/"}, want: 200},
		{name: "release needs credentials", f: op, r: req{method: "POST", target: releasePath(opKey), form: release(op, opKey)}, want: 401, wantHeader: "Basic"},
		{name: "confirmation needs credentials", f: op, r: req{target: releasePath(opKey)}, want: 401, wantHeader: "Basic"},
		{name: "wrong password", f: op, r: req{method: "POST", target: releasePath(opKey), form: release(op, opKey), basic: [2]string{testUser, "nope"}}, want: 401},
		{name: "wrong user", f: op, r: req{method: "POST", target: releasePath(opKey), form: release(op, opKey), basic: [2]string{"mallory", testPass}}, want: 401},
		{name: "wrong token", f: op, r: req{method: "POST", target: apiLockPath(opKey) + "/release", json: map[string]string{"fingerprint": "00", "reason": "x"}, bearer: "tok-nope"}, want: 401, wantHeader: "Bearer"},
		{name: "right basic shows confirmation", f: op, r: req{target: releasePath(opKey), basic: [2]string{testUser, testPass}}, want: 200, wantBody: `data-testid="release-form"`},
		{name: "right basic releases", f: op, r: req{method: "POST", target: releasePath(opKey), form: release(op, opKey), basic: [2]string{testUser, testPass}}, want: 200, wantBody: `data-outcome="released"`},
		{name: "right bearer releases via API", f: op, r: req{method: "POST", target: apiLockPath(opKey2) + "/release", json: map[string]string{"fingerprint": op.fingerprint(t, opKey2), "reason": "x"}, bearer: testToken}, want: 200, wantBody: `"released":true`},
		{name: "strict read needs credentials", f: strict, r: req{target: "/"}, want: 401, wantHeader: "Bearer"},
		{name: "strict API read needs credentials", f: strict, r: req{target: "/api/v1/overview"}, want: 401, wantBody: `"error"`},
		{name: "strict read with token", f: strict, r: req{target: "/keys", bearer: testToken}, want: 200},
		{name: "strict healthz open", f: strict, r: req{target: "/healthz"}, want: 200, wantBody: "ok"},
		{name: "strict metrics open", f: strict, r: req{target: "/metrics"}, want: 200, wantBody: "lockscope_up 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := c.f.do(t, c.r)
			if rec.Code != c.want {
				t.Fatalf("%s %s = %d, want %d; body %.300s", c.r.method, c.r.target, rec.Code, c.want, rec.Body.String())
			}
			if c.wantBody != "" && !strings.Contains(rec.Body.String(), c.wantBody) {
				t.Errorf("body does not contain %q: %.500s", c.wantBody, rec.Body.String())
			}
			if got := rec.Header().Values("WWW-Authenticate"); c.wantHeader != "" && !strings.Contains(strings.Join(got, ","), c.wantHeader) {
				t.Errorf("WWW-Authenticate = %q, want %q", got, c.wantHeader)
			}
		})
	}

	// The releases above were real: both keys are gone from Redis.
	for _, k := range []string{opKey, opKey2} {
		if n, err := op.rdb.Exists(context.Background(), k).Result(); err != nil || n != 0 {
			t.Errorf("EXISTS %q after release = %d, %v, want 0", k, n, err)
		}
	}
	// Read-only releases were refused: the key is still there.
	if n, _ := ro.rdb.Exists(context.Background(), roKey).Result(); n != 1 {
		t.Errorf("EXISTS %q after refused releases = %d, want 1", roKey, n)
	}
}

func TestReadOnlyHidesReleaseControls(t *testing.T) {
	for _, c := range []struct {
		opt  *Options
		want int
	}{{nil, 0}, {operatorOptions(), 1}} {
		f := newFixture(t, c.opt)
		key := f.pfx + "held"
		f.obtain(t, key, "w", time.Minute, false)
		rec := f.do(t, req{target: keyPath(key)})
		if rec.Code != 200 {
			t.Fatalf("GET key page = %d, want 200", rec.Code)
		}
		doc := htmlDoc(t, rec)
		if got := len(byTestID(doc, "release-link")); got != c.want {
			t.Errorf("release links with options %+v = %d, want %d", c.opt, got, c.want)
		}
		if got, want := len(byTestID(doc, "readonly-banner")), 1-c.want; got != want {
			t.Errorf("read-only banners = %d, want %d", got, want)
		}
	}
}

func TestNewRejectsHalfCredentials(t *testing.T) {
	agg := state.New(state.Config{})
	for _, o := range []*Options{{Username: "u"}, {Password: "p"}, {RequireAuthForRead: true}, {TrustedOrigins: []string{"not a url"}}} {
		if _, err := New(agg, nil, o); err == nil {
			t.Errorf("New(%+v) = nil error, want an error", o)
		}
	}
}

func TestCrossOriginPostRefused(t *testing.T) {
	f := newFixture(t, operatorOptions())
	key := f.pfx + "k"
	f.obtain(t, key, "w", time.Minute, false)
	form := url.Values{"fingerprint": {f.fingerprint(t, key)}, "reason": {"csrf"}}
	creds := [2]string{testUser, testPass}
	for _, c := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"sec-fetch-site cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"sec-fetch-site same-site", map[string]string{"Sec-Fetch-Site": "same-site"}, 403},
		{"origin mismatch", map[string]string{"Origin": "https://evil.example"}, 403},
		{"api origin mismatch", map[string]string{"Origin": "https://evil.example"}, 403},
	} {
		t.Run(c.name, func(t *testing.T) {
			target := releasePath(key)
			if strings.HasPrefix(c.name, "api") {
				target = apiLockPath(key) + "/release"
			}
			rec := f.do(t, req{method: "POST", target: target, form: form, basic: creds, hdr: c.hdr})
			if rec.Code != c.want {
				t.Fatalf("cross-origin POST = %d, want %d; body %.200s", rec.Code, c.want, rec.Body.String())
			}
			if !strings.Contains(rec.Body.String(), "cross-origin") {
				t.Errorf("body does not explain the refusal: %.300s", rec.Body.String())
			}
		})
	}
	if n, _ := f.rdb.Exists(context.Background(), key).Result(); n != 1 {
		t.Fatalf("EXISTS after cross-origin POSTs = %d, want 1 (nothing released)", n)
	}
	// The same POST from the dashboard's own page goes through.
	rec := f.do(t, req{method: "POST", target: releasePath(key), form: form, basic: creds,
		hdr: map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://example.com"}})
	if rec.Code != 200 {
		t.Fatalf("same-origin POST = %d, want 200; body %.300s", rec.Code, rec.Body.String())
	}
}

func TestSecurityHeadersAndNonce(t *testing.T) {
	f := newFixture(t, nil)
	nonces := map[string]bool{}
	for range 2 {
		rec := f.do(t, req{target: "/"})
		csp := rec.Header().Get("Content-Security-Policy")
		m := regexp.MustCompile(`script-src 'nonce-([A-Za-z0-9_-]+)'`).FindStringSubmatch(csp)
		if m == nil {
			t.Fatalf("CSP = %q, want script-src with a nonce", csp)
		}
		for _, d := range []string{"default-src 'none'", "frame-ancestors 'none'", "style-src 'self'", "base-uri 'none'", "form-action 'self'"} {
			if !strings.Contains(csp, d) {
				t.Errorf("CSP = %q, want %q", csp, d)
			}
		}
		doc := htmlDoc(t, rec)
		scripts := byTag(doc, "script")
		if len(scripts) != 1 || attr(scripts[0], "nonce") != m[1] {
			t.Errorf("script tags %d with nonce %q, want 1 with the header's nonce %q", len(scripts), attr(scripts[0], "nonce"), m[1])
		}
		nonces[m[1]] = true
		for h, want := range map[string]string{"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"} {
			if got := rec.Header().Get(h); got != want {
				t.Errorf("%s = %q, want %q", h, got, want)
			}
		}
	}
	if len(nonces) != 2 {
		t.Errorf("nonces of two requests = %v, want two different ones", nonces)
	}
	// Static assets are served and cacheable; the script is ours.
	rec := f.do(t, req{target: string(staticPath("live.js"))})
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "localStorage") {
		t.Fatalf("GET live.js = %d, want 200 and the live-refresh script", rec.Code)
	}
	if got := rec.Header().Get("Cache-Control"); !strings.Contains(got, "immutable") {
		t.Errorf("versioned asset Cache-Control = %q, want immutable", got)
	}
	if rec := f.do(t, req{target: "/static/nope.js"}); rec.Code != 404 {
		t.Errorf("GET missing asset = %d, want 404", rec.Code)
	}
}

func TestReadyz(t *testing.T) {
	f := newFixture(t, nil)
	f.agg.SetHealth(errors.New("redis: connection refused"))
	rec := f.do(t, req{target: "/readyz"})
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "connection refused") {
		t.Errorf("readyz unhealthy = %d %q, want 503 with the reason", rec.Code, rec.Body.String())
	}
	doc := htmlDoc(t, f.do(t, req{target: "/"}))
	if got := text(one(t, doc, "ingest-banner")); !strings.Contains(got, "connection refused") {
		t.Errorf("ingest banner = %q, want the reason", got)
	}
	f.agg.SetHealth(nil)
	if rec := f.do(t, req{target: "/readyz"}); rec.Code != 200 {
		t.Errorf("readyz healthy = %d %q, want 200", rec.Code, rec.Body.String())
	}
	if rec := f.do(t, req{target: "/healthz"}); rec.Code != 200 {
		t.Errorf("healthz = %d, want 200", rec.Code)
	}
}

func TestForceReleaseOwnerChanged(t *testing.T) {
	f := newFixture(t, operatorOptions())
	key := f.pfx + "job:42"
	first := f.obtain(t, key, "worker-old", time.Minute, false)
	seen := f.fingerprint(t, key) // what the operator saw on the confirmation

	// Before the operator confirms, the old holder finishes and a new one takes the lock.
	if err := first.Release(context.Background()); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	f.obtain(t, key, "worker-new", time.Minute, false)
	newFP := f.fingerprint(t, key)
	if newFP == seen {
		t.Fatalf("fingerprints of two holders are equal: %s", seen)
	}

	rec := f.do(t, req{method: "POST", target: releasePath(key), basic: [2]string{testUser, testPass},
		form: url.Values{"fingerprint": {seen}, "reason": {"stuck since deploy"}}})
	if rec.Code != http.StatusConflict {
		t.Fatalf("POST release with a stale fingerprint = %d, want 409; body %.300s", rec.Code, rec.Body.String())
	}
	doc := htmlDoc(t, rec)
	res := one(t, doc, "release-result")
	if got := attr(res, "data-outcome"); got != "owner-changed" {
		t.Errorf("outcome = %q, want owner-changed", got)
	}
	if got := text(one(t, doc, "result-heading")); !strings.Contains(got, "nothing touched") {
		t.Errorf("heading = %q, want it to say nothing was touched", got)
	}
	if got := text(one(t, doc, "holder-owner")); got != "worker-new" {
		t.Errorf("current holder shown = %q, want worker-new", got)
	}
	// The new holder's lock is untouched.
	if got := f.fingerprint(t, key); got != newFP {
		t.Errorf("fingerprint after refused release = %s, want %s (untouched)", got, newFP)
	}

	// The API answers the same.
	rec = f.do(t, req{method: "POST", target: apiLockPath(key) + "/release", bearer: testToken,
		json: map[string]string{"fingerprint": seen, "reason": "again"}})
	if rec.Code != http.StatusConflict {
		t.Fatalf("API release with a stale fingerprint = %d, want 409", rec.Code)
	}
	got := decodeJSON[apiReleaseResult](t, rec)
	if got.Error != "owner changed, nothing released" || got.Released || got.Current == nil || got.Current.Owner != "worker-new" || got.Current.Fingerprint != newFP {
		t.Errorf("API owner-changed answer = %+v, want error, not released, current holder worker-new", got)
	}
	if !strings.Contains(f.logs.String(), "owner changed") {
		t.Errorf("log does not record the refused release: %s", f.logs.String())
	}
}

func TestForceReleaseSucceedsAndHolderSeesLoss(t *testing.T) {
	f := newFixture(t, operatorOptions())
	key := f.pfx + "invoice:7"
	const ttl = 600 * time.Millisecond
	lease := f.obtain(t, key, "billing/host-1/42", ttl, true)

	// The confirmation shows the holder and embeds its fingerprint.
	rec := f.do(t, req{target: releasePath(key), basic: [2]string{testUser, testPass}})
	if rec.Code != 200 {
		t.Fatalf("GET confirmation = %d, want 200; body %.300s", rec.Code, rec.Body.String())
	}
	doc := htmlDoc(t, rec)
	form := one(t, doc, "release-form")
	var fp string
	for _, in := range byTag(form, "input") {
		if attr(in, "name") == "fingerprint" {
			fp = attr(in, "value")
		}
	}
	if want := f.fingerprint(t, key); fp != want {
		t.Fatalf("confirmation fingerprint = %q, want %q", fp, want)
	}
	if got := text(one(t, doc, "holder-owner")); got != "billing/host-1/42" {
		t.Errorf("confirmation holder = %q, want billing/host-1/42", got)
	}

	// Missing and oversized reasons are refused before Redis is touched.
	for _, reason := range []string{"", "   ", strings.Repeat("x", MaxReason+1)} {
		rec := f.do(t, req{method: "POST", target: attr(form, "action"), basic: [2]string{testUser, testPass},
			form: url.Values{"fingerprint": {fp}, "reason": {reason}}})
		if rec.Code != http.StatusUnprocessableEntity {
			t.Errorf("POST with reason of %d bytes = %d, want 422", len(reason), rec.Code)
			continue
		}
		if n := len(byTestID(htmlDoc(t, rec), "form-error")); n != 1 {
			t.Errorf("form errors shown = %d, want 1", n)
		}
	}

	start := time.Now()
	rec = f.do(t, req{method: "POST", target: attr(form, "action"), basic: [2]string{testUser, testPass},
		form: url.Values{"fingerprint": {fp}, "reason": {"hung after OOM, INC-1"}}})
	if rec.Code != 200 {
		t.Fatalf("POST release = %d, want 200; body %.300s", rec.Code, rec.Body.String())
	}
	if got := attr(one(t, htmlDoc(t, rec), "release-result"), "data-outcome"); got != "released" {
		t.Errorf("outcome = %q, want released", got)
	}
	if n, _ := f.rdb.Exists(context.Background(), key).Result(); n != 0 {
		t.Errorf("EXISTS after release = %d, want 0", n)
	}
	// The renewing holder sees the loss at its next renewal (every ttl/3).
	select {
	case <-lease.Context().Done():
		if d := time.Since(start); d > ttl {
			t.Errorf("lease context cancelled %v after the release, want within one renewal interval (%v)", d, ttl/3)
		}
	case <-time.After(2 * ttl):
		t.Fatalf("lease context not cancelled %v after the release", 2*ttl)
	}

	logs := f.logs.String()
	for _, want := range []string{"forced release", "by=alice", "hung after OOM", "owner=billing/host-1/42"} {
		if !strings.Contains(logs, want) {
			t.Errorf("audit log lacks %q: %s", want, logs)
		}
	}
	// The forced event reached the aggregator: the overview lists it.
	doc = htmlDoc(t, f.do(t, req{target: "/"}))
	rows := byTestID(doc, "forced-row")
	if len(rows) != 1 || !strings.Contains(text(rows[0]), "alice") || !strings.Contains(text(rows[0]), "hung after OOM") {
		t.Errorf("forced rows = %d (%v), want one by alice with the reason", len(rows), func() string {
			if len(rows) > 0 {
				return text(rows[0])
			}
			return ""
		}())
	}

	// Releasing again: nothing is held.
	rec = f.do(t, req{method: "POST", target: apiLockPath(key) + "/release", bearer: testToken, json: map[string]string{"fingerprint": fp, "reason": "again"}})
	if rec.Code != http.StatusNotFound || decodeJSON[apiError](t, rec).Error != "lock not held, nothing released" {
		t.Errorf("second release = %d %s, want 404 not held", rec.Code, rec.Body.String())
	}
	if rec := f.do(t, req{target: releasePath(key), basic: [2]string{testUser, testPass}}); rec.Code != 404 {
		t.Errorf("confirmation of a free key = %d, want 404", rec.Code)
	}
}

func TestHostileKeysRoundTrip(t *testing.T) {
	f := newFixture(t, operatorOptions())
	now := time.Now()
	var keys []string
	for _, k := range hostileKeys() {
		key := f.pfx + k
		keys = append(keys, key)
		f.agg.Apply(contended(key, 3, 20*time.Millisecond, now.Add(-10*time.Second)))
		f.obtain(t, key, "owner <b>\"'\n", time.Minute, false)
	}
	for _, key := range keys {
		// The detail page, reached by the escaped path, shows exactly this key.
		rec := f.do(t, req{target: keyPath(key)})
		if rec.Code != 200 {
			t.Errorf("GET %.60q = %d, want 200", keyPath(key), rec.Code)
			continue
		}
		doc := htmlDoc(t, rec)
		want, _ := keytext.Visible(key)
		if got := rawText(one(t, doc, "key-title")); got != want {
			t.Errorf("detail title = %.60q, want %.60q", got, want)
		}
		if n := len(byTag(doc, "script")); n != 1 {
			t.Errorf("detail page of %.40q has %d script elements, want 1 (ours)", key, n)
		}

		// The keys page finds it and links to that same page.
		search := f.pfx + strings.Map(func(r rune) rune { // a printable part of the key to search for
			if r < 0x20 || r == 0xfffd {
				return -1
			}
			return r
		}, strings.TrimPrefix(key, f.pfx)[:min(len(key)-len(f.pfx), 3)])
		if !strings.HasPrefix(key, search) {
			search = f.pfx
		}
		rec = f.do(t, req{target: "/keys?" + url.Values{"q": {search}}.Encode()})
		found := false
		for _, a := range byTestID(htmlDoc(t, rec), "key-link") {
			if attr(a, "href") == keyPath(key) {
				found = true
			}
		}
		if !found {
			t.Errorf("keys page searching %.40q has no link to %.60q", search, keyPath(key))
		}

		// JSON carries the exact bytes.
		rec = f.do(t, req{target: apiLockPath(key)})
		if rec.Code != 200 {
			t.Errorf("GET %.60q = %d, want 200", apiLockPath(key), rec.Code)
			continue
		}
		d := decodeJSON[apiLockDetail](t, rec)
		if got := jsonKey(t, d.Key, d.KeyB64); got != key {
			t.Errorf("API key = %.60q (b64 %q), want %.60q", d.Key, d.KeyB64, key)
		}
		if d.Redis == nil || d.Redis.Owner != "owner <b>\"'\n" {
			t.Errorf("API redis holder = %+v, want owner with markup intact", d.Redis)
		}
		if strings.Contains(rec.Body.String(), "<b>") || strings.Contains(rec.Body.String(), "<script>") {
			t.Errorf("JSON contains raw markup: %.200s", rec.Body.String())
		}
		if d.Href != apiLockPath(key) {
			t.Errorf("API href = %.60q, want %.60q", d.Href, apiLockPath(key))
		}
	}

	// The hot-key API lists them with exact bytes, and their hrefs lead back.
	rec := f.do(t, req{target: "/api/v1/hotkeys?window=1m&n=100"})
	hk := decodeJSON[apiHotKeys](t, rec)
	got := map[string]string{}
	for _, h := range hk.Keys {
		got[jsonKey(t, h.Key, h.KeyB64)] = h.Href
	}
	for _, key := range keys {
		href, ok := got[key]
		if !ok {
			t.Errorf("hot keys lack %.60q", key)
			continue
		}
		if rec := f.do(t, req{target: href}); rec.Code != 200 {
			t.Errorf("GET hot key href %.60q = %d, want 200", href, rec.Code)
		}
	}

	// A hostile key can be force-released through its escaped paths.
	for _, key := range []string{f.pfx + "new\nline", f.pfx + "bad\xff\xfeutf8", f.pfx + "..", f.pfx + "a/b/c"} {
		rec := f.do(t, req{target: releasePath(key), basic: [2]string{testUser, testPass}})
		if rec.Code != 200 {
			t.Fatalf("GET confirmation of %q = %d", key, rec.Code)
		}
		form := one(t, htmlDoc(t, rec), "release-form")
		rec = f.do(t, req{method: "POST", target: attr(form, "action"), basic: [2]string{testUser, testPass},
			form: url.Values{"fingerprint": {f.fingerprint(t, key)}, "reason": {"hostile"}}})
		if rec.Code != 200 {
			t.Errorf("POST release of %q = %d, want 200; %.200s", key, rec.Code, rec.Body.String())
		}
		if n, _ := f.rdb.Exists(context.Background(), key).Result(); n != 0 {
			t.Errorf("EXISTS %q after release = %d, want 0", key, n)
		}
	}
}

func TestOverviewFiguresAndHotKeys(t *testing.T) {
	f := newFixture(t, nil)
	now := time.Now()
	hot, warm := f.pfx+"orders:1", f.pfx+"orders:2"
	f.agg.Apply(contended(hot, 30, 50*time.Millisecond, now.Add(-20*time.Second)))
	f.agg.Apply(contended(warm, 5, 5*time.Millisecond, now.Add(-20*time.Second)))
	f.obtain(t, f.pfx+"held:1", "w", time.Minute, false)

	doc := htmlDoc(t, f.do(t, req{target: "/?window=1m&by=contentions"}))
	rows := byTestID(doc, "hotkey-row")
	if len(rows) < 2 {
		t.Fatalf("hot key rows = %d, want at least 2", len(rows))
	}
	if got := attr(one(t, rows[0], "hotkey-link"), "href"); got != keyPath(hot) {
		t.Errorf("top hot key links to %q, want %q", got, keyPath(hot))
	}
	if got := text(one(t, rows[0], "hotkey-contentions")); got != "30" && got != "≈ 30" {
		t.Errorf("top hot key contentions = %q, want 30", got)
	}
	if got := text(one(t, one(t, doc, "stat-held"), "value")); got != "1" {
		t.Errorf("held tile = %q, want 1", got)
	}
	for _, id := range []string{"acquire-rate", "contention", "wait-p99", "held", "waiters", "stuck", "expirations", "forced"} {
		if href := attr(one(t, doc, "stat-"+id), "href"); href == "" {
			t.Errorf("tile %s links nowhere", id)
		}
	}
	if got := attr(one(t, doc, "by-wait"), "href"); got != "/?window=1m&by=wait#hot" {
		t.Errorf("by-wait link = %q", got)
	}
	if rec := f.do(t, req{target: "/?window=2m"}); rec.Code != 400 {
		t.Errorf("GET /?window=2m = %d, want 400", rec.Code)
	}

	o := decodeJSON[apiOverview](t, f.do(t, req{target: "/api/v1/overview"}))
	if o.Held != 1 || o.EventsTotal < 70 || !o.ReadOnly {
		t.Errorf("API overview held=%d events=%d read_only=%v, want 1, >= 70, true", o.Held, o.EventsTotal, o.ReadOnly)
	}
	hk := decodeJSON[apiHotKeys](t, f.do(t, req{target: "/api/v1/hotkeys?window=1m&by=wait&n=2"}))
	if len(hk.Keys) != 2 || hk.Keys[0].Key != hot || hk.By != "wait" || hk.Window != "1m" {
		t.Errorf("API hot keys by wait = %+v, want %q first of 2", hk, hot)
	}
	if rec := f.do(t, req{target: "/api/v1/hotkeys?by=size"}); rec.Code != 400 || decodeJSON[apiError](t, rec).Error == "" {
		t.Errorf("API hot keys by=size = %d %s, want 400 with a JSON error", rec.Code, rec.Body.String())
	}
}

func TestKeysPageFilterSortPaginate(t *testing.T) {
	f := newFixture(t, &Options{PageSize: 10})
	now := time.Now()
	var evs []event.Event
	for i := range 25 {
		key := f.pfx + "batch:" + string(rune('a'+i))
		evs = append(evs, contended(key, i+1, time.Millisecond, now.Add(-30*time.Second))...)
	}
	evs = append(evs, contended(f.pfx+"other-thing", 1, 0, now.Add(-30*time.Second))...)
	f.agg.Apply(evs)

	q := url.Values{"q": {f.pfx + "batch:"}, "sort": {"contentions"}}
	doc := htmlDoc(t, f.do(t, req{target: "/keys?" + q.Encode()}))
	if got := text(one(t, doc, "total")); got != "25" {
		t.Errorf("total = %q, want 25", got)
	}
	rows := byTestID(doc, "key-row")
	if len(rows) != 10 {
		t.Fatalf("rows on page 1 = %d, want 10", len(rows))
	}
	if got := attr(one(t, rows[0], "key-link"), "href"); got != keyPath(f.pfx+"batch:y") {
		t.Errorf("first row = %q, want the most contended key batch:y", got)
	}
	next := attr(one(t, doc, "next"), "href")
	doc = htmlDoc(t, f.do(t, req{target: next}))
	if got := len(byTestID(doc, "key-row")); got != 10 {
		t.Errorf("rows on page 2 = %d, want 10", got)
	}
	doc = htmlDoc(t, f.do(t, req{target: attr(one(t, doc, "next"), "href")}))
	if got := len(byTestID(doc, "key-row")); got != 5 {
		t.Errorf("rows on page 3 = %d, want 5", got)
	}
	if n := len(byTestID(doc, "next")); n != 0 {
		t.Errorf("next links on the last page = %d, want 0", n)
	}

	lp := decodeJSON[apiLockPage](t, f.do(t, req{target: "/api/v1/locks?" + url.Values{"q": {f.pfx}, "sort": {"key"}, "order": {"asc"}, "limit": {"3"}, "offset": {"1"}}.Encode()}))
	if lp.Total != 26 || len(lp.Locks) != 3 || lp.Locks[0].Key != f.pfx+"batch:b" {
		t.Errorf("API locks = total %d, %d locks, first %q; want 26, 3, batch:b", lp.Total, len(lp.Locks), func() string {
			if len(lp.Locks) > 0 {
				return lp.Locks[0].Key
			}
			return ""
		}())
	}
	for _, bad := range []string{"sort=size", "limit=0", "limit=501", "offset=-1", "order=up"} {
		if rec := f.do(t, req{target: "/api/v1/locks?" + bad}); rec.Code != 400 {
			t.Errorf("API locks ?%s = %d, want 400", bad, rec.Code)
		}
	}
	if rec := f.do(t, req{target: "/keys?page=0"}); rec.Code != 400 {
		t.Errorf("keys ?page=0 = %d, want 400", rec.Code)
	}
}

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

// /keys and the key page agree on a key's average hold and wait: the hold in
// progress has no length yet, and failed tries waited too.
func TestKeysAndKeyPageAgreeOnAverages(t *testing.T) {
	f := newFixture(t, nil)
	key := f.pfx + "avg:1"
	t0 := time.Now().Add(-2 * time.Minute)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: key, Owner: "a", Lease: "l1", TS: at(0), Wait: 100 * time.Millisecond, Attempts: 2, TTL: time.Minute},
		{Type: event.Released, Key: key, Owner: "a", Lease: "l1", TS: at(10 * time.Second), Hold: 10 * time.Second},
		{Type: event.Failed, Key: key, Owner: "b", TS: at(11 * time.Second), Wait: 300 * time.Millisecond, Attempts: 3, Reason: "held"},
		{Type: event.Acquired, Key: key, Owner: "c", Lease: "l2", TS: at(20 * time.Second), Wait: 200 * time.Millisecond, Attempts: 2, TTL: time.Minute},
		{Type: event.Released, Key: key, Owner: "c", Lease: "l2", TS: at(50 * time.Second), Hold: 30 * time.Second},
		{Type: event.Acquired, Key: key, Owner: "d", Lease: "l3", TS: at(60 * time.Second), Attempts: 1, TTL: time.Hour},
	})
	doc := htmlDoc(t, f.do(t, req{target: "/keys?q=" + url.QueryEscape(key)}))
	hold, wait := text(one(t, doc, "hold-avg")), text(one(t, doc, "wait-avg"))
	if hold != "20s" || wait != "150ms" {
		t.Errorf("/keys avg hold %q, avg wait %q; want 20s and 150ms (as the key page)", hold, wait)
	}
	page := htmlDoc(t, f.do(t, req{target: keyPath(key)}))
	if h := text(one(t, page, "hold-dist")); !strings.Contains(h, "mean 20s") {
		t.Errorf("key page hold card %q, want mean 20s", h)
	}
	if w := text(one(t, page, "wait-dist")); !strings.Contains(w, "mean 150ms") {
		t.Errorf("key page wait card %q, want mean 150ms", w)
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

// The forced-release log reads as a sentence, and failed acquisitions are
// noted under acquisitions, not under forced releases.
func TestOverviewForcedRowAndTileNotes(t *testing.T) {
	f := newFixture(t, nil)
	key := f.pfx + "export:1"
	now := time.Now()
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: key, Owner: "export-worker/pod-2", Lease: "l1", TS: now.Add(-time.Minute).UnixNano(), TTL: time.Hour, Attempts: 1},
		{Type: event.Forced, Key: key, Owner: "export-worker/pod-2", Lease: "l1", TS: now.UnixNano(), By: "demo", Reason: "hung"},
		{Type: event.Failed, Key: key, Owner: "b", TS: now.UnixNano(), Wait: time.Second, Attempts: 3, Reason: "timeout"},
	})
	doc := htmlDoc(t, f.do(t, req{target: "/"}))
	if got := strings.Join(strings.Fields(text(one(t, doc, "forced-row"))), " "); !strings.Contains(got, "by demo from export-worker/pod-2 ") {
		t.Errorf("forced row reads %q, want \"by demo from export-worker/pod-2 …\"", got)
	}
	if got := text(one(t, doc, "stat-forced")); strings.Contains(got, "failed") {
		t.Errorf("forced tile %q speaks of failed acquisitions", got)
	}
	if got := text(one(t, doc, "stat-acquire-rate")); !strings.Contains(got, "1 failed in 5 min") {
		t.Errorf("acquisitions tile %q, want the failed acquisitions noted", got)
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

// /keys opens with what needs attention first: stuck holds, then held keys
// with waiters, then other held keys, then the rest by contentions; its
// column headers sort.
func TestKeysOpenWithWhatNeedsAttention(t *testing.T) {
	f := newFixture(t, nil)
	now := time.Now()
	p := f.pfx
	f.agg.Apply(contended(p+"free-hot", 30, 10*time.Millisecond, now.Add(-time.Minute)))
	acq := func(key string, since time.Duration) event.Event {
		return event.Event{Type: event.Acquired, Key: key, Owner: "o", Lease: "l-" + key, TS: now.Add(-since).UnixNano(), TTL: time.Hour, Attempts: 1}
	}
	waiting := event.Event{Type: event.Waiting, Key: p + "held-waited", Owner: "w", Lease: "w1", TS: now.UnixNano(), Wait: time.Minute}
	f.agg.Apply([]event.Event{acq(p+"held", time.Second), acq(p+"stuck", 10*time.Minute), acq(p+"held-waited", 2*time.Second), waiting})
	f.agg.Tick()
	doc := htmlDoc(t, f.do(t, req{target: "/keys?q=" + url.QueryEscape(p)}))
	var got []string
	for _, a := range byTestID(doc, "key-link") {
		got = append(got, strings.TrimPrefix(text(a), p))
	}
	if want := []string{"stuck", "held-waited", "held", "free-hot"}; !slices.Equal(got, want) {
		t.Errorf("/keys order = %v, want %v", got, want)
	}
	for state, want := range map[string][]string{
		"stuck":  {"stuck"},
		"waited": {"held-waited"},
		"held":   {"stuck", "held-waited", "held"},
		"free":   {"free-hot"},
	} {
		d := htmlDoc(t, f.do(t, req{target: "/keys?state=" + state + "&q=" + url.QueryEscape(p)}))
		var keys []string
		for _, a := range byTestID(d, "key-link") {
			keys = append(keys, strings.TrimPrefix(text(a), p))
		}
		if !slices.Equal(keys, want) {
			t.Errorf("/keys?state=%s = %v, want %v", state, keys, want)
		}
		if href := attr(byTag(one(t, d, "sort-contentions"), "a")[0], "href"); !strings.Contains(href, "state="+state) {
			t.Errorf("/keys?state=%s: sort links drop the state filter: %q", state, href)
		}
	}
	if rec := f.do(t, req{target: "/keys?state=bogus"}); rec.Code != 400 {
		t.Errorf("/keys?state=bogus = %d, want 400", rec.Code)
	}
	th := one(t, doc, "sort-attention")
	if attr(th, "aria-sort") != "descending" {
		t.Errorf("the State header is not marked as the active sort")
	}
	if href := attr(byTag(one(t, doc, "sort-contentions"), "a")[0], "href"); !strings.Contains(href, "sort=contentions") || !strings.Contains(href, "q=") {
		t.Errorf("Contentions header links to %q, want the same filters sorted by contentions", href)
	}
}

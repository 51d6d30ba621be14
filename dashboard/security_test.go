package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
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

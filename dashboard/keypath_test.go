package dashboard

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/keytext"
)

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

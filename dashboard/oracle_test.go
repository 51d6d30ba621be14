package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
)

// TestNoValueOracle: the dashboard is no oracle for what Redis stores. A
// one-time password stored as `SET otp:user42 493817 EX 300` was recovered
// from the SHA-1 fingerprint that GET /api/v1/locks/{key} gave any
// anonymous viewer (issue 27). Now an anonymous viewer gets for a key that
// no lock event names the same 404 whether Redis holds it or not; for a key
// a writer of the stream made tracked, no holder when its value is of no
// known library's shape; and never a fingerprint. An operator sees all.
func TestNoValueOracle(t *testing.T) {
	f := newFixture(t, operatorOptions())
	ctx := context.Background()
	otp, absent := f.pfx+"otp:user42", f.pfx+"otp:user43"
	if err := f.rdb.Set(ctx, otp, "493817", 5*time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	fp := lock.Fingerprint("493817")
	secretFree := func(what, body string) {
		t.Helper()
		for _, s := range []string{fp[:8], "493817"} {
			if strings.Contains(body, s) {
				t.Errorf("%s gives away %q: %.400s", what, s, body)
			}
		}
	}
	anon := func(target string) (int, string) {
		rec := f.do(t, req{target: target})
		return rec.Code, rec.Body.String()
	}
	errorOf := func(body string) string {
		var e apiError
		json.Unmarshal([]byte(body), &e)
		return e.Error
	}

	// Untracked: the same answer whether the key exists in Redis or not.
	code, body := anon(apiLockPath(otp))
	code2, body2 := anon(apiLockPath(absent))
	if code != http.StatusNotFound || code2 != http.StatusNotFound || errorOf(body) == "" || errorOf(body) != errorOf(body2) {
		t.Errorf("anonymous API on an untracked key: %d %q (stored) and %d %q (absent), want the same 404", code, errorOf(body), code2, errorOf(body2))
	}
	secretFree("anonymous API on an untracked key", body)
	page := func(target string) (int, string, string) {
		rec := f.do(t, req{target: target})
		body := rec.Body.String()
		return rec.Code, text(one(t, htmlDoc(t, rec), "error-message")), body
	}
	code, msg, body := page(keyPath(otp))
	code2, msg2, _ := page(keyPath(absent))
	if code != http.StatusNotFound || code2 != http.StatusNotFound || msg != msg2 {
		t.Errorf("anonymous key page of an untracked key: %d %q (stored), %d %q (absent), want the same 404", code, msg, code2, msg2)
	}
	secretFree("anonymous key page of an untracked key", body)
	if !strings.Contains(msg, "shown to operators only") {
		t.Errorf("anonymous 404 = %q, want it to say who may see more", msg)
	}

	// An operator sees what Redis holds, fingerprint included.
	rec := f.do(t, req{target: apiLockPath(otp), bearer: testToken})
	if rec.Code != http.StatusOK {
		t.Fatalf("operator API on an untracked stored key = %d, want 200: %.300s", rec.Code, rec.Body.String())
	}
	got := decodeJSON[apiLockDetail](t, rec)
	if got.Tracked || got.Redis == nil || !strings.HasPrefix(got.Redis.Fingerprint, fp) || got.Redis.Owner != "foreign "+fp[:8] {
		t.Errorf("operator API = tracked %v, holder %+v; want untracked, foreign %s, fingerprint %s…", got.Tracked, got.Redis, fp[:8], fp)
	}
	if rec := f.do(t, req{target: keyPath(otp), basic: [2]string{testUser, testPass}}); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "foreign "+fp[:8]) {
		t.Errorf("operator key page of an untracked stored key = %d, want 200 with its holder", rec.Code)
	}

	// A writer of the stream makes the key tracked: anonymous viewers now
	// see its events, and that Redis holds something, but not what.
	f.agg.Apply([]event.Event{{Type: event.Acquired, Key: otp, Owner: "forger", Lease: "l1", TS: time.Now().UnixNano(), TTL: time.Minute, Attempts: 1}})
	code, body = anon(apiLockPath(otp))
	if code != http.StatusOK {
		t.Fatalf("anonymous API on a tracked key = %d, want 200: %.300s", code, body)
	}
	secretFree("anonymous API on a forged tracked key", body)
	var tracked apiLockDetail
	if err := json.Unmarshal([]byte(body), &tracked); err != nil || !tracked.Tracked || tracked.Redis != nil || !tracked.RedisHidden || tracked.Owner != "forger" {
		t.Errorf("anonymous API on a forged tracked key = %+v (%v), want tracked, owner forger, redis_holder null and redis_hidden", tracked, err)
	}
	rec = f.do(t, req{target: keyPath(otp)})
	body = rec.Body.String()
	if got := text(one(t, htmlDoc(t, rec), "holder")); rec.Code != http.StatusOK || !strings.Contains(got, hiddenNote) || !strings.Contains(got, "forger") {
		t.Errorf("anonymous key page of a forged tracked key = %d, holder card %q; want the stream's holder and %q", rec.Code, got, hiddenNote)
	}
	secretFree("anonymous key page of a forged tracked key", body)

	// A tracked lockscope lock: its holder, without the fingerprint.
	held := f.pfx + "job:7"
	f.obtain(t, held, "worker-7", time.Minute, false)
	heldFP := f.fingerprint(t, held)
	code, body = anon(apiLockPath(held))
	var lk apiLockDetail
	if err := json.Unmarshal([]byte(body), &lk); code != http.StatusOK || err != nil || lk.Redis == nil || lk.Redis.Owner != "worker-7" || lk.Redis.Fingerprint != "" {
		t.Errorf("anonymous API on a held lock = %d, holder %+v (%v); want worker-7 without a fingerprint", code, lk.Redis, err)
	}
	if strings.Contains(body, heldFP[:8]) {
		t.Errorf("anonymous API on a held lock gives its fingerprint away: %.400s", body)
	}
	rec = f.do(t, req{target: apiLockPath(held), bearer: testToken})
	if lk := decodeJSON[apiLockDetail](t, rec); lk.Redis == nil || lk.Redis.Fingerprint != heldFP {
		t.Errorf("operator API on a held lock: holder %+v, want fingerprint %s", lk.Redis, heldFP)
	}
}

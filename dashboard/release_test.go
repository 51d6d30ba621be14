package dashboard

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/lock"
)

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
	// A renewal every ttl/3 finds the key gone: the TTL leaves a busy host
	// two more renewal intervals to see it before the lease would lapse.
	const ttl = 3 * time.Second
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
	// Its error says which: not_owner (a renewal found the key gone), not
	// error (the TTL ran out unrenewed); how soon is logged.
	select {
	case <-lease.Context().Done():
		t.Logf("lease context cancelled %v after the release (renewal interval %v)", time.Since(start).Round(time.Millisecond), ttl/3)
		if err := lease.Err(); !errors.Is(err, lock.ErrLost) || !strings.Contains(err.Error(), event.ReasonNotOwner) {
			t.Errorf("lease Err() = %v, want lost (%s): its next renewal saw the release", err, event.ReasonNotOwner)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("lease context not cancelled 30s after the release (renewal interval %v)", ttl/3)
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

// A forced release's audit line must say which key and whose lock, also in a
// JSON log, which replaces invalid UTF-8: a key (owner) that is not UTF-8
// carries its exact bytes in key_b64 (owner_b64), as in the API.
func TestAuditLogKeepsTheBytesOfAKey(t *testing.T) {
	f := newFixture(t, operatorOptions())
	ctx := context.Background()
	key, owner := f.pfx+"bin\xff\xfe\n", "worker\xc3"
	if _, err := f.lc.Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Owner: owner}); err != nil {
		t.Fatal(err)
	}
	h, err := f.lc.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	rec := f.do(t, req{method: http.MethodPost, target: "/api/v1/locks/" + keytext.PathSegment(key) + "/release",
		json: map[string]string{"fingerprint": h.Fingerprint, "reason": "audit test"}, bearer: testToken})
	if rec.Code != http.StatusOK {
		t.Fatalf("POST release = %d %s, want 200", rec.Code, rec.Body)
	}
	logs := f.logs.String()
	// The text handler quotes a value with '=' in it (base64 padding).
	for name, v := range map[string]string{"key_b64": base64.StdEncoding.EncodeToString([]byte(key)),
		"owner_b64": base64.StdEncoding.EncodeToString([]byte(owner)), "by": "ci-bot"} {
		if !strings.Contains(logs, " "+name+"="+v+" ") && !strings.Contains(logs, " "+name+"="+strconv.Quote(v)+" ") {
			t.Errorf("audit log lacks %s=%s:\n%s", name, v, logs)
		}
	}
}

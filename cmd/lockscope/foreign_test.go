package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// Other libraries store a random token as the lock's value, and whoever knows
// it can extend or release the lock with that library's API. The read-only
// dashboard, the open API and /metrics name such a holder by library and
// fingerprint; the value is shown only to an operator who asks for it.
func TestForeignTokensAreNeverShownReadOnly(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	base, _ := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_OPERATOR_TOKEN=s3cret-token-0123"},
		"--watch", "py:*,rs:*", "--watch-no-ttl")

	// redis-py's Lock.acquire and redsync's Mutex.Lock, command for command.
	locks := map[string]struct{ token, owner string }{
		"py:invoice-7": {"5f0c6e1aa7e211ef9c2b0242ac120002", "redis-py " + lock.Fingerprint("5f0c6e1aa7e211ef9c2b0242ac120002")[:8]},
		"rs:cart-42":   {"q1Jx0m8ZbQ7yC4wXr2T9Uw==", "redsync " + lock.Fingerprint("q1Jx0m8ZbQ7yC4wXr2T9Uw==")[:8]},
	}
	for key, l := range locks {
		if err := rdb.SetNX(ctx, key, l.token, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for key, l := range locks {
		redistest.WaitFor(t, 10*time.Second, "the collector and Redis to show the foreign lock", func() error {
			_, body, err := get(ctx, base+"/api/v1/locks/"+url.PathEscape(key))
			var v struct {
				Held  bool   `json:"held"`
				Owner string `json:"owner"`
				Class string `json:"class"`
				Redis *struct {
					Owner string     `json:"owner"`
					Since *time.Time `json:"since"`
				} `json:"redis_holder"`
			}
			if err != nil || json.Unmarshal([]byte(body), &v) != nil {
				return fmt.Errorf("GET /api/v1/locks/%s: %v %s", key, err, body)
			}
			if !v.Held || v.Owner != l.owner || v.Redis == nil || v.Redis.Owner != l.owner || v.Redis.Since == nil {
				return fmt.Errorf("GET /api/v1/locks/%s = %s; want held by %q with its since", key, body, l.owner)
			}
			// Classes are derived as for the library's keys: not one per key.
			if want := strings.TrimRight(key, "0123456789") + "*"; v.Class != want {
				return fmt.Errorf("GET /api/v1/locks/%s class %q, want %q", key, v.Class, want)
			}
			return nil
		})
	}

	anonymous := []string{"/", "/keys", "/blocking", "/metrics", "/api/v1/overview", "/api/v1/hotkeys", "/api/v1/locks", "/api/v1/blocking"}
	for key := range locks {
		anonymous = append(anonymous, "/keys/"+url.PathEscape(key), "/api/v1/locks/"+url.PathEscape(key))
	}
	for _, path := range anonymous {
		code, body, err := get(ctx, base+path)
		if err != nil || code != 200 {
			t.Fatalf("GET %s = %d, %v", path, code, err)
		}
		for key, l := range locks {
			if strings.Contains(body, l.token) {
				t.Errorf("GET %s shows %s's token %q to anyone", path, key, l.token)
			}
		}
	}
	_, page, _ := get(ctx, base+"/keys/py:invoice-7")
	if !strings.Contains(page, locks["py:invoice-7"].owner) {
		t.Errorf("key page does not name the holder %q", locks["py:invoice-7"].owner)
	}
	// Nobody saw whether redis-py waited: unknown, not 0.
	if !strings.Contains(page, `data-testid="wait-dist-empty"`) || !strings.Contains(page, "watched passively") {
		t.Errorf("key page of a passive lock does not say its wait is unknown")
	}
	if _, keys, _ := get(ctx, base+"/keys"); !strings.Contains(keys, ">unknown<") {
		t.Errorf("/keys does not show the passive lock's wait and contention as unknown")
	}

	// Asking for the value: anonymous is refused, an operator gets it.
	do := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, b := send(t, req)
		return resp.StatusCode, b
	}
	reveal := "/api/v1/locks/" + url.PathEscape("py:invoice-7") + "?reveal=value"
	if code, body := do(reveal, ""); code != http.StatusUnauthorized || strings.Contains(body, locks["py:invoice-7"].token) {
		t.Errorf("anonymous reveal = %d %s, want 401 without the value", code, body)
	}
	if code, body := do(reveal, "wrong"); code != http.StatusUnauthorized || strings.Contains(body, locks["py:invoice-7"].token) {
		t.Errorf("reveal with a wrong token = %d %s, want 401 without the value", code, body)
	}
	if code, body := do(reveal, "s3cret-token-0123"); code != 200 || !strings.Contains(body, `"value":"`+locks["py:invoice-7"].token+`"`) {
		t.Errorf("operator reveal = %d %s, want 200 with the value", code, body)
	}
	if code, body := do("/keys/"+url.PathEscape("rs:cart-42")+"/release", "s3cret-token-0123"); code != 200 || !strings.Contains(body, locks["rs:cart-42"].token) {
		t.Errorf("release confirmation for an operator = %d, want 200 showing the stored value", code)
	}

	// The CLI names the holder the same way; --reveal prints the value.
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL()}
	out, errOut, code := lockscope(t, env, "", "inspect", "py:invoice-7")
	if code != 0 || strings.Contains(out, locks["py:invoice-7"].token) || !strings.Contains(out, locks["py:invoice-7"].owner) {
		t.Errorf("inspect = %d\n%s%s\nwant the holder named %q and no token", code, out, errOut, locks["py:invoice-7"].owner)
	}
	out, _, code = lockscope(t, env, "", "inspect", "--reveal", "py:invoice-7")
	if code != 0 || !strings.Contains(out, locks["py:invoice-7"].token) {
		t.Errorf("inspect --reveal = %d\n%s\nwant the token", code, out)
	}
	out, _, code = lockscope(t, env, "", "locks", "--json")
	if code != 0 || strings.Contains(out, locks["py:invoice-7"].token) || strings.Contains(out, locks["rs:cart-42"].token) {
		t.Errorf("locks --json = %d\n%s\nwant no token", code, out)
	}
}

// A redis-py Lock without timeout has no TTL: if its holder dies, it stays
// held forever. Told that such keys are locks (--watch-no-ttl, --no-ttl),
// every view lists it with a warning; otherwise `locks` says how many it
// left out.
func TestLockWithoutExpiryIsListedWithAWarning(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	// No flag needed: the value is a redis-py token.
	base, _ := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL()}, "--watch", "py:*")
	const key, token = "py:nightly-report", "f38f5694e9a511f18bee02fc00000001" // uuid1().hex
	if err := rdb.SetNX(ctx, key, token, 0).Err(); err != nil {                // redis-py Lock(timeout=None).acquire()
		t.Fatal(err)
	}
	// A plain value without a TTL under the same pattern: no lock.
	rdb.Set(ctx, "py:settings", "retries=3", 0)
	redistest.WaitFor(t, 15*time.Second, "the lock without expiry in both views", func() error {
		_, body, err := get(ctx, base+"/api/v1/locks/"+url.PathEscape(key))
		var v struct {
			Held     bool    `json:"held"`
			Owner    string  `json:"owner"`
			TTL      float64 `json:"ttl_seconds"`
			NoExpiry bool    `json:"no_expiry"`
			Redis    *struct {
				TTL      float64 `json:"ttl_seconds"`
				NoExpiry bool    `json:"no_expiry"`
			} `json:"redis_holder"`
		}
		if err != nil || json.Unmarshal([]byte(body), &v) != nil {
			return fmt.Errorf("GET /api/v1/locks/%s: %v %s", key, err, body)
		}
		if !v.Held || v.Owner != lock.ForeignOwner(token) || !strings.HasPrefix(v.Owner, "redis-py ") || v.TTL != -1 || !v.NoExpiry || v.Redis == nil || v.Redis.TTL != -1 || !v.Redis.NoExpiry {
			return fmt.Errorf("GET /api/v1/locks/%s = %s; want held by redis-py, ttl_seconds -1 and no_expiry in both views", key, body)
		}
		return nil
	})
	redistest.WaitFor(t, 10*time.Second, "lockscope_locks_without_expiry to count it", func() error {
		_, m, _ := get(ctx, base+"/metrics")
		if n, _ := metricSum(m, "lockscope_locks_without_expiry"); n != 1 {
			return fmt.Errorf("lockscope_locks_without_expiry = %v, want 1", n)
		}
		return nil
	})
	// Not tracked, and so to a viewer without credentials the same 404 as a
	// key Redis does not have.
	if code, body, _ := get(ctx, base+"/api/v1/locks/py:settings"); code != http.StatusNotFound || !strings.Contains(body, "no events seen") {
		t.Errorf("GET /api/v1/locks/py:settings = %d %s, want 404, not tracked: a plain value is no lock", code, body)
	}
	for _, path := range []string{"/keys", "/keys/" + url.PathEscape(key)} {
		_, body, err := get(ctx, base+path)
		if err != nil || !strings.Contains(body, `data-testid="no-expiry"`) {
			t.Errorf("GET %s has no \"no expiry\" warning (err %v)", path, err)
		}
	}
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL()}
	out, errOut, code := lockscope(t, env, "", "locks", "py:*")
	if code != 0 || !strings.Contains(out, key) || !strings.Contains(out, "NO EXPIRY") || strings.Contains(out, "py:settings") ||
		!strings.Contains(errOut, "1 listed locks never expire") || !strings.Contains(errOut, "1 matching keys have no TTL") {
		t.Errorf("locks = %d\n%s%s\nwant %s listed with NO EXPIRY and a warning, py:settings left out and counted", code, out, errOut, key)
	}
	out, errOut, code = lockscope(t, env, "", "locks", "--no-ttl", "py:*")
	if code != 0 || !strings.Contains(out, key) || !strings.Contains(out, "py:settings") || !strings.Contains(errOut, "2 listed locks never expire") {
		t.Errorf("locks --no-ttl = %d\n%s%s\nwant both listed with NO EXPIRY", code, out, errOut)
	}
}

// A constant lock value (SETNX "1" style) cannot tell its holder from a
// successor. With a TTL its expiry can: a release of what the operator saw
// never removes a successor. Without one, the release is refused unless the
// operator accepts releasing whoever holds it — on the command line and on
// the dashboard's confirmation.
func TestForcedReleaseOfConstantValues(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL()}

	// The holder the operator inspected dies; a successor writes the same "1".
	rdb.SetNX(ctx, "cron:nightly", "1", time.Minute)
	out, _, code := lockscope(t, env, "", "inspect", "--json", "cron:nightly")
	var seen struct {
		Fingerprint string `json:"fingerprint"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &seen) != nil || !strings.Contains(seen.Fingerprint, "@") {
		t.Fatalf("inspect = %d %s; want a fingerprint with the expiry", code, out)
	}
	// Written a millisecond on at least, so that its expiry differs.
	_, seenAt, _ := strings.Cut(seen.Fingerprint, "@")
	redistest.WaitFor(t, 10*time.Second, "a successor with another expiry", func() bool {
		rdb.Del(ctx, "cron:nightly")
		rdb.SetNX(ctx, "cron:nightly", "1", time.Minute)
		return strconv.FormatInt(rdb.PExpireTime(ctx, "cron:nightly").Val().Milliseconds(), 10) != seenAt
	})
	_, errOut, code := lockscope(t, env, "", "release", "cron:nightly", "--fingerprint", seen.Fingerprint, "--reason", "stale view", "--yes")
	if code != 3 || rdb.Exists(ctx, "cron:nightly").Val() != 1 {
		t.Errorf("release of the dead holder's view = %d (%s); want 3 and the successor untouched", code, errOut)
	}

	// No expiry: refused unless --any-holder.
	rdb.Set(ctx, "flag:migrate", "locked", 0)
	_, errOut, code = lockscope(t, env, "", "release", "flag:migrate", "--reason", "stuck", "--yes")
	if code != 3 || !strings.Contains(errOut, "--any-holder") || rdb.Exists(ctx, "flag:migrate").Val() != 1 {
		t.Errorf("release without --any-holder = %d (%s); want 3, the key kept, and how to proceed", code, errOut)
	}
	_, _, code = lockscope(t, env, "y\n", "release", "flag:migrate", "--reason", "stuck", "--any-holder")
	if code == 0 || rdb.Exists(ctx, "flag:migrate").Val() != 1 {
		t.Errorf("answering 'y' to \"Type 'yes'\" = %d; want not confirmed", code)
	}
	_, errOut, code = lockscope(t, env, "yes\n", "release", "flag:migrate", "--reason", "stuck", "--any-holder")
	if code != 0 || rdb.Exists(ctx, "flag:migrate").Val() != 0 {
		t.Errorf("release --any-holder = %d (%s); want 0 and the key gone", code, errOut)
	}

	// The dashboard's confirmation: the same rule, with a checkbox.
	rdb.Set(ctx, "flag:deploy", "1", 0)
	base, _ := serveReady(t, append(env, "LOCKSCOPE_OPERATOR_USER=ops", "LOCKSCOPE_OPERATOR_PASSWORD=pw-0123456789"))
	resp, page := request(t, base+"/keys/flag:deploy/release", "", "ops", "pw-0123456789")
	if resp.StatusCode != 200 || !strings.Contains(page, `data-testid="ambiguous-warning"`) || !strings.Contains(page, `name="accept_ambiguous"`) {
		t.Fatalf("confirmation = %d; want the warning and the checkbox:\n%s", resp.StatusCode, page)
	}
	post := func(form url.Values) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/keys/flag:deploy/release", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth("ops", "pw-0123456789")
		resp, b := send(t, req)
		return resp.StatusCode, b
	}
	form := url.Values{"fingerprint": {lock.Fingerprint("1")}, "reason": {"deploy hung"}}
	if code, body := post(form); code != http.StatusConflict || !strings.Contains(body, "Cannot tell") || rdb.Exists(ctx, "flag:deploy").Val() != 1 {
		t.Errorf("POST without accepting = %d; want 409, the key kept:\n%s", code, body)
	}
	form.Set("accept_ambiguous", "yes")
	if code, body := post(form); code != 200 || rdb.Exists(ctx, "flag:deploy").Val() != 0 {
		t.Errorf("POST accepting = %d; want 200 and the key gone:\n%s", code, body)
	}
}

// A forced release of a watched redis-py lock through the API is one forced
// release: not also a release, and the timeline reads "forced" only.
func TestForcedReleaseOfAWatchedLockCountsOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	base, _ := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_OPERATOR_TOKEN=s3cret-token-0123"}, "--watch", "py:*")
	const key, token = "py:export-9", "9b1c3f0e2d4a5b6c7d8e9fa0b1c2d3e4"
	rdb.SetNX(ctx, key, token, time.Minute)
	redistest.WaitFor(t, 10*time.Second, "the foreign lock to be seen held", func() error {
		_, body, _ := get(ctx, base+"/api/v1/locks/"+key)
		if !strings.Contains(body, `"held":true`) {
			return errors.New("not held yet: " + body)
		}
		return nil
	})
	if code, body := apiRelease(t, base, key, lock.Fingerprint(token), "export hung", "s3cret-token-0123"); code != 200 {
		t.Fatalf("release = %d %s", code, body)
	}
	redistest.WaitFor(t, 10*time.Second, "the forced release to be counted", func() error {
		_, m, _ := get(ctx, base+"/metrics")
		forced, _ := metricSum(m, "lockscope_forced_releases_total")
		if forced != 1 {
			return fmt.Errorf("lockscope_forced_releases_total = %v, want 1", forced)
		}
		return nil
	})
	// A passive release waits (parked, 750 ms) for its forced event, or
	// until a later event of its key: a successor's hold settles it at once.
	rdb.SetNX(ctx, key, "0a1b2c3d4e5f60718293a4b5c6d7e8f9", time.Minute)
	redistest.WaitFor(t, 10*time.Second, "the successor to be seen held", func() error {
		_, body, _ := get(ctx, base+"/api/v1/locks/"+key)
		if !strings.Contains(body, `"held":true`) {
			return errors.New("not held yet: " + body)
		}
		return nil
	})
	_, m, _ := get(ctx, base+"/metrics")
	if n, found := metricSum(m, `lockscope_releases_total{class="py:export-*",outcome="released"}`); !found || n != 0 {
		t.Errorf("lockscope_releases_total of the class = %v (found %v): want 0, the forced release counted once", n, found)
	}
	_, body, _ := get(ctx, base+"/api/v1/locks/"+key)
	var v struct {
		Held   bool `json:"held"`
		Recent []struct {
			Type string `json:"type"`
			By   string `json:"by"`
		} `json:"recent"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range v.Recent {
		types = append(types, e.Type)
	}
	// The lock was seen acquired, or found held by the watcher's first scan
	// (renewed) if it was taken before the subscription; then forced, then
	// the successor's hold.
	if tl := strings.Join(types, ","); !v.Held || tl != "acquired,forced,acquired" && tl != "acquired,forced,renewed" {
		t.Errorf("after the forced release and a successor: held %v, timeline %v; want held, [acquired forced acquired]", v.Held, types)
	}
}

// A Redisson lock (a hash, as Java Redisson writes it) through the binary:
// `lockscope locks` lists it held by its Redisson holder, `inspect` shows
// its reentrancy, `release` removes what the operator saw and publishes
// Redisson's unlock message so that its waiters try again; the dashboard's
// API shows it held and releases it the same way.
func TestRedissonLockThroughTheCommandsAndTheDashboard(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL()}
	take := func(key, field string) {
		// RLock.tryLockInnerAsync: HINCRBY and PEXPIRE (the watchdog's 30 s,
		// which renews it; here longer, as no watchdog renews it and the
		// commands below may take that long on a loaded host).
		rdb.HIncrBy(ctx, key, field, 1)
		rdb.HIncrBy(ctx, key, field, 1) // re-entered
		rdb.PExpire(ctx, key, 5*time.Minute)
	}
	const key, field = "rz:report", "6d2b8f4e-1c3a-4b5d-9e6f-7a8b9c0d1e2f:42"
	take(key, field)
	rdb.HSet(ctx, "rz:session", "user", "42") // a hash that is no lock

	out, errOut, code := lockscope(t, env, "", "locks", "rz:*")
	if code != 0 || !strings.Contains(out, "redisson 6d2b8f4e:42") || strings.Contains(out, "rz:session") {
		t.Errorf("locks = %d\n%s%s\nwant rz:report held by redisson 6d2b8f4e:42, and no rz:session", code, out, errOut)
	}
	out, _, code = lockscope(t, env, "", "inspect", "--reveal", key)
	if code != 0 || !strings.Contains(out, "redisson lock: 6d2b8f4e:42 ×2") {
		t.Errorf("inspect --reveal = %d\n%s\nwant the holder and its reentrancy count", code, out)
	}
	sub := rdb.Subscribe(ctx, "redisson_lock__channel:{"+key+"}")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := lockscope(t, env, "", "release", key, "--reason", "report hung", "--yes", "--operator-user", "ana"); code != 0 || rdb.Exists(ctx, key).Val() != 0 {
		t.Fatalf("release = %d\n%s%s\nwant the Redisson lock released", code, out, errOut)
	}
	if m, err := sub.ReceiveMessage(ctx); err != nil || m.Payload != "0" {
		t.Errorf("after release, the lock's channel got %v, %v; want Redisson's unlock message 0", m, err)
	}

	base, _ := serveReady(t, append(env, "LOCKSCOPE_OPERATOR_TOKEN=s3cret-token-0123"), "--watch", "rz:*")
	take(key, field)
	var fp string
	redistest.WaitFor(t, 10*time.Second, "the Redisson lock held in the API", func() error {
		// The fingerprint a release quotes is shown to operators only.
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/locks/"+url.PathEscape(key), nil)
		req.Header.Set("Authorization", "Bearer s3cret-token-0123")
		_, body := send(t, req)
		var v struct {
			Held  bool   `json:"held"`
			Owner string `json:"owner"`
			Redis *struct {
				Fingerprint string `json:"fingerprint"`
			} `json:"redis_holder"`
		}
		if json.Unmarshal([]byte(body), &v) != nil || !v.Held || v.Owner != "redisson 6d2b8f4e:42" || v.Redis == nil {
			return errors.New("not held by redisson 6d2b8f4e:42 yet: " + body)
		}
		fp = v.Redis.Fingerprint
		return nil
	})
	if code, body := apiRelease(t, base, key, fp, "stuck again", "s3cret-token-0123"); code != 200 {
		t.Fatalf("POST release = %d %s", code, body)
	}
	if m, err := sub.ReceiveMessage(ctx); err != nil || m.Payload != "0" {
		t.Errorf("after the dashboard's release, the lock's channel got %v, %v; want 0", m, err)
	}
	redistest.WaitFor(t, 10*time.Second, "the forced release in the API", func() error {
		_, body, _ := get(ctx, base+"/api/v1/locks/"+url.PathEscape(key))
		if !strings.Contains(body, `"held":false`) || !strings.Contains(body, `"type":"forced"`) {
			return errors.New("not released and forced yet: " + body)
		}
		return nil
	})
}

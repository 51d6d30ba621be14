package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/redisson"
	"github.com/lockscope/lockscope/internal/testkit/redissontest"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// apiLockWaiters is what /api/v1/locks/{key} says of a key's holder and
// waiters.
type apiLockWaiters struct {
	Held    bool   `json:"held"`
	Owner   string `json:"owner"`
	Waiters int    `json:"waiters"`
	Now     []struct {
		Owner    string     `json:"owner"`
		Lease    string     `json:"lease"`
		Holder   string     `json:"holder_seen"`
		Deadline *time.Time `json:"deadline"`
	} `json:"waiters_now"`
	Redis *struct {
		Fingerprint string `json:"fingerprint"`
	} `json:"redis_holder"`
}

type apiBlockingView struct {
	Waiters int `json:"waiters"`
	Holders []struct {
		Key     string `json:"key"`
		Owner   string `json:"owner"`
		Waiters int    `json:"waiters"`
	} `json:"holders"`
}

// Redisson's waiters show where our library's do: a node-redisson holder
// with two node-redisson callers waiting for it (subscribed to the lock's
// channel: counted by PUBSUB NUMSUB, not named) and a fair lock taken with
// Java Redisson's own script with two threads in its queue (named, in
// order, each with its timeout), seen by `serve --watch` in
// /api/v1/blocking, the key's waiters and waiters_now in
// /api/v1/locks/{key}, the key page, /blocking and lockscope_waiters; an
// anonymous subscriber is a row "redisson waiter" whose deadline is not
// known (null), not a made-up one. After the locks are released (forced
// releases through the API: the woken waiters take them; the last gives
// up or takes the lock after the holder's crash), every one of them clears.
func TestRedissonWaitersShowWhereOursDo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	const token = "s3cret-token-0123"
	base, _ := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_OPERATOR_TOKEN=" + token}, "--watch", "rw:*")
	lockAPI := func(key string) (apiLockWaiters, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/locks/"+url.PathEscape(key), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		_, body := send(t, req)
		var v apiLockWaiters
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			return v, fmt.Errorf("%v: %s", err, body)
		}
		return v, nil
	}
	blocking := func() (apiBlockingView, error) {
		_, body, err := get(ctx, base+"/api/v1/blocking")
		var v apiBlockingView
		if err == nil {
			err = json.Unmarshal([]byte(body), &v)
		}
		return v, err
	}
	waitersMetric := func() (float64, error) {
		_, body, err := get(ctx, base+"/metrics")
		if err != nil {
			return 0, err
		}
		n, ok := metricSum(body, "lockscope_waiters")
		if !ok {
			return 0, errors.New("no lockscope_waiters in /metrics")
		}
		return n, nil
	}
	page := func(path string) string {
		code, body, err := get(ctx, base+path)
		if err != nil || code != 200 {
			t.Fatalf("GET %s = %d, %v", path, code, err)
		}
		return body
	}

	// A plain lock: a holder, two callers waiting on its channel.
	const plain, watchdog = "rw:plain", 4 * time.Second
	holder := redissontest.StartNode(t, srv.Port(), plain, watchdog)
	redistest.WaitFor(t, 30*time.Second, "the holder's lock", func() error {
		if holder.AcquiredAt().IsZero() {
			return errors.New("not acquired")
		}
		return nil
	})
	plainWaiters := []*redissontest.Node{redissontest.StartNode(t, srv.Port(), plain, watchdog), redissontest.StartNode(t, srv.Port(), plain, watchdog)}

	// A fair lock, as Java Redisson takes it: A holds it, B then C queue.
	// A's lease (4 minutes) and their thread wait time (10 s) put their
	// timeouts minutes away, so a slow host does not see them leave the
	// queue, and within the 5 minutes the state keeps a waiter.
	const fair = "rw:fair"
	fairKeys := []string{fair, redisson.QueueKey(fair), redisson.TimeoutKey(fair)}
	const idA, idB, idC = "0a6a8f0e-4f6e-4c1b-9d2a-4f0e1c2b3a4d", "1b7b9f1f-5a7f-4d2c-8e3b-5a1f2d3c4b5e", "2c8ca020-6b80-4e3d-9f4c-6b20e4d5c6f7"
	tryFair := func(field string) any {
		v, err := rdb.Eval(ctx, redissontest.FairTryLock, fairKeys, 4*60*1000, field, 10000, time.Now().UnixMilli()).Result()
		if err != nil && err.Error() != "redis: nil" {
			t.Fatalf("fair tryLock(%s): %v", field, err)
		}
		return v
	}
	if v := tryFair(idA + ":1"); v != nil {
		t.Fatalf("fair tryLock(A) = %v, want nil (acquired)", v)
	}
	tryFair(idB + ":2")
	tryFair(idC + ":3")

	var plainOwner string
	redistest.WaitFor(t, 30*time.Second, "both locks' waiters in the API", func() error {
		p, err := lockAPI(plain)
		if err != nil {
			return err
		}
		f, err := lockAPI(fair)
		if err != nil {
			return err
		}
		if !p.Held || p.Waiters != 2 || len(p.Now) != 2 || !f.Held || f.Waiters != 2 || len(f.Now) != 2 {
			return fmt.Errorf("plain %+v, fair %+v; want each held with 2 waiters", p, f)
		}
		plainOwner = p.Owner
		return nil
	})
	p, _ := lockAPI(plain)
	for i, x := range p.Now {
		if x.Owner != "redisson waiter" || x.Deadline != nil || x.Holder != p.Owner || !strings.HasPrefix(x.Lease, "redisson-c:") {
			t.Errorf("plain lock's waiter %d = %+v; want an anonymous \"redisson waiter\" of %s, its deadline unknown (null)", i, x, p.Owner)
		}
	}
	if n := rdb.PubSubNumSub(ctx, redisson.Channel(plain)).Val()[redisson.Channel(plain)]; n != 2 {
		t.Errorf("PUBSUB NUMSUB = %d, want 2", n)
	}
	f, _ := lockAPI(fair)
	timeouts := rdb.ZRangeWithScores(ctx, redisson.TimeoutKey(fair), 0, -1).Val()
	for i, want := range []struct{ owner, field string }{{"redisson 1b7b9f1f:2", idB + ":2"}, {"redisson 2c8ca020:3", idC + ":3"}} {
		x := f.Now[i]
		var timeout time.Time
		for _, z := range timeouts {
			if z.Member == want.field {
				timeout = time.UnixMilli(int64(z.Score))
			}
		}
		if x.Owner != want.owner || x.Holder != "redisson 0a6a8f0e:1" || x.Deadline == nil || x.Deadline.Sub(timeout).Abs() > time.Second {
			t.Errorf("fair lock's waiter %d = %+v; want %s waiting for redisson 0a6a8f0e:1 until %v", i, x, want.owner, timeout)
		}
	}

	b, err := blocking()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, h := range b.Holders {
		got[h.Key] = fmt.Sprintf("%s/%d", h.Owner, h.Waiters)
	}
	if b.Waiters != 4 || got[plain] != plainOwner+"/2" || got[fair] != "redisson 0a6a8f0e:1/2" {
		t.Errorf("/api/v1/blocking: %d waiters, holders %v; want 4, %s held by %s with 2 and %s by redisson 0a6a8f0e:1 with 2", b.Waiters, got, plain, plainOwner, fair)
	}
	if n, err := waitersMetric(); err != nil || n != 4 {
		t.Errorf("lockscope_waiters = %v, %v; want 4", n, err)
	}
	if body := page("/keys/" + url.PathEscape(plain)); strings.Count(body, `data-testid="waiter-row"`) != 2 || strings.Count(body, "redisson waiter") < 2 || !strings.Contains(body, "not known") {
		t.Errorf("the plain lock's page does not list its 2 anonymous waiters, their deadline not known:\n%s", body)
	}
	if body := page("/keys/" + url.PathEscape(fair)); strings.Count(body, `data-testid="waiter-row"`) != 2 ||
		!(strings.Index(body, "redisson 1b7b9f1f:2") < strings.Index(body, "redisson 2c8ca020:3") && strings.Contains(body, "redisson 2c8ca020:3")) {
		t.Errorf("the fair lock's page does not list B then C:\n%s", body)
	}
	if body := page("/blocking"); strings.Count(body, `data-testid="blocking-row"`) != 2 || !strings.Contains(body, "4 callers are waiting") {
		t.Errorf("/blocking does not rank the two holders with 4 callers waiting:\n%s", body)
	}

	// Release both through the API, as an operator would: the fingerprint
	// carries the hash's expiry, which the holder's watchdog moves every
	// 1.3 s, so an operator answered 409 (owner changed) reads it again.
	release := func(key string) {
		t.Helper()
		redistest.WaitFor(t, 30*time.Second, "the release of "+key, func() error {
			v, err := lockAPI(key)
			if err != nil || v.Redis == nil {
				t.Fatalf("%s: %+v, %v; want its holder in Redis", key, v, err)
			}
			switch code, body := apiRelease(t, base, key, v.Redis.Fingerprint, "test", token); code {
			case 200:
				return nil
			case 409:
				return fmt.Errorf("release %s = 409 %s", key, body)
			default:
				t.Fatalf("release %s = %d %s", key, code, body)
				return nil
			}
		})
	}
	release(plain)
	var next, last *redissontest.Node
	redistest.WaitFor(t, 30*time.Second, "a plain waiter woken by the release", func() error {
		for i, w := range plainWaiters {
			if !w.AcquiredAt().IsZero() {
				next, last = w, plainWaiters[1-i]
				return nil
			}
		}
		return errors.New("no waiter took it")
	})
	release(fair)
	if v := tryFair(idB + ":2"); v != nil {
		t.Fatalf("B's tryLock after the release = %v, want nil (acquired)", v)
	}
	if err := rdb.Eval(ctx, redissontest.FairAcquireFailed, fairKeys[1:], idC+":3", 10000).Err(); err != nil && err.Error() != "redis: nil" {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 30*time.Second, "one waiter left: the plain lock's last", func() error {
		b, err := blocking()
		if err != nil || b.Waiters != 1 || len(b.Holders) != 1 || b.Holders[0].Key != plain {
			return fmt.Errorf("blocking %+v, %v", b, err)
		}
		return nil
	})
	// The plain lock's new holder crashes: the lock expires, the last
	// waiter takes it.
	next.Kill()
	redistest.WaitFor(t, 30*time.Second, "the last waiter holds the plain lock", func() error {
		if last.AcquiredAt().IsZero() {
			return errors.New("not yet")
		}
		return nil
	})
	redistest.WaitFor(t, 30*time.Second, "no waiter anywhere", func() error {
		b, err := blocking()
		if err != nil || b.Waiters != 0 || len(b.Holders) != 0 {
			return fmt.Errorf("blocking %+v, %v", b, err)
		}
		n, err := waitersMetric()
		if err != nil || n != 0 {
			return fmt.Errorf("lockscope_waiters = %v, %v", n, err)
		}
		for _, key := range []string{plain, fair} {
			v, err := lockAPI(key)
			if err != nil || v.Waiters != 0 || len(v.Now) != 0 || !v.Held {
				return fmt.Errorf("%s: %+v, %v; want held, no waiter", key, v, err)
			}
		}
		return nil
	})
	for _, key := range []string{plain, fair} {
		if body := page("/keys/" + url.PathEscape(key)); !strings.Contains(body, `data-testid="no-waiters"`) {
			t.Errorf("%s's page still lists waiters", key)
		}
	}
	if body := page("/blocking"); !strings.Contains(body, "Nobody is waiting for a lock now.") {
		t.Errorf("/blocking still shows waiters")
	}
}

// Redisson semaphores under a "PATTERN=semaphore" watch rule: their key
// page and /api/v1/locks/{key} show them live from Redis, to anyone (a
// rule names them: no oracle), as what they are: an RSemaphore's permits
// available, in use not known (null: Redis keeps no total), an expirable
// semaphore's permits in use each with its id and expiry, the clients
// waiting on the channel. The watcher takes none of their counters for a
// lock, nor a counter under a plain pattern for a semaphore; no forced
// release deletes one.
func TestRedissonSemaphoresOnTheDashboard(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	const token = "s3cret-token-0123"
	base, _ := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_OPERATOR_TOKEN=" + token}, "--watch", "rs:sem:*=semaphore", "--watch", "rs:*")
	eval := func(script string, keys []string, args ...any) {
		t.Helper()
		if err := rdb.Eval(ctx, script, keys, args...).Err(); err != nil && err.Error() != "redis: nil" {
			t.Fatalf("eval: %v", err)
		}
	}
	const plain, exp = "rs:sem:exports", "rs:sem:uploads"
	eval(redissontest.SemaphoreTrySetPermits, []string{plain, redisson.SemaphoreChannel(plain)}, 5, "publish")
	eval(redissontest.SemaphoreTryAcquire, []string{plain}, 2)
	eval(redissontest.SemaphoreTrySetPermits, []string{exp, redisson.SemaphoreChannel(exp)}, 3, "publish")
	permit := "\xa1\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\xa1"
	expires := time.Now().Add(10 * time.Minute).UnixMilli()
	eval(redissontest.ExpirableTryAcquire, []string{exp, redisson.SemaphoreTimeoutKey(exp), redisson.SemaphoreChannel(exp)},
		1, expires, time.Now().UnixMilli(), redissontest.ExpirableNoLease, "publish", permit)
	rdb.Set(ctx, "rs:count", "7", time.Hour) // a counter, no semaphore: under no semaphore rule
	sub := rdb.Subscribe(ctx, redisson.SemaphoreChannel(plain))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	// A redsync lock after them: once it is seen, so were their writes.
	rdb.SetNX(ctx, "rs:lock", "q2c4Z5w0f3f1Yp8Ykz1nCg==", time.Hour)
	redistest.WaitFor(t, 30*time.Second, "the redsync lock seen", func() error {
		_, body, err := get(ctx, base+"/api/v1/locks/rs:lock")
		if err != nil || !strings.Contains(body, `"held":true`) {
			return fmt.Errorf("%v: %s", err, body)
		}
		return nil
	})

	type semJSON struct {
		Kind      string `json:"kind"`
		Available int64  `json:"permits_available"`
		Used      *int64 `json:"permits_used"`
		Permits   []struct {
			ID      string     `json:"id"`
			Expires *time.Time `json:"expires"`
		} `json:"permits"`
		Waiters int64 `json:"waiters"`
	}
	lockJSON := func(key string) (int, semJSON, string) {
		code, body, err := get(ctx, base+"/api/v1/locks/"+url.PathEscape(key))
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Held      bool     `json:"held"`
			Semaphore *semJSON `json:"semaphore"`
		}
		json.Unmarshal([]byte(body), &v)
		if v.Semaphore == nil {
			return code, semJSON{}, body
		}
		if v.Held {
			t.Errorf("%s: a semaphore shown held: %s", key, body)
		}
		return code, *v.Semaphore, body
	}
	code, s, body := lockJSON(plain)
	if code != 200 || s.Kind != "semaphore" || s.Available != 3 || s.Used != nil || len(s.Permits) != 0 || s.Waiters != 1 {
		t.Errorf("%s: %d %s; want a semaphore with 3 permits available, in use null, 1 client waiting", plain, code, body)
	}
	code, s, body = lockJSON(exp)
	if code != 200 || s.Kind != "permit-expirable semaphore" || s.Available != 2 || s.Used == nil || *s.Used != 1 || len(s.Permits) != 1 ||
		s.Permits[0].ID != "a10102030405060708090a0b0c0d0ea1" || s.Permits[0].Expires == nil || s.Permits[0].Expires.UnixMilli() != expires {
		t.Errorf("%s: %d %s; want 1 permit in use (a1010203…, expiring at %d), 2 available", exp, code, body, expires)
	}
	if code, _, body := lockJSON("rs:count"); code != 404 {
		t.Errorf("rs:count (a counter under a plain pattern) = %d %s; want 404: neither lock nor semaphore", code, body)
	}
	page := func(key string) string {
		code, body, err := get(ctx, base+"/keys/"+url.PathEscape(key))
		if err != nil || code != 200 {
			t.Fatalf("GET /keys/%s = %d, %v\n%s", key, code, err, body)
		}
		return body
	}
	if body := page(plain); !strings.Contains(body, `data-testid="permits-used">not known<`) || !strings.Contains(body, `data-testid="permits-available">3<`) ||
		!strings.Contains(body, `data-testid="semaphore-waiters">1<`) || strings.Contains(body, "release-link") {
		t.Errorf("%s's page does not show 3 available, in use not known, 1 waiting (and no release):\n%s", plain, body)
	}
	if body := page(exp); !strings.Contains(body, `data-testid="permits-used">1<`) || strings.Count(body, `data-testid="permit-row"`) != 1 || !strings.Contains(body, "a10102030405060708090a0b0c0d0ea1") {
		t.Errorf("%s's page does not show its permit in use:\n%s", exp, body)
	}
	// No forced release deletes a semaphore's counter.
	if code, body := apiRelease(t, base, plain, "0000000000000000000000000000000000000000", "test", token); code != http.StatusConflict || rdb.Get(ctx, plain).Val() != "3" {
		t.Errorf("release of a semaphore = %d %s, counter %q; want 409 and the counter 3 untouched", code, body, rdb.Get(ctx, plain).Val())
	}
	_, metrics, err := get(ctx, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := metricSum(metrics, "lockscope_acquisitions_total"); n != 1 {
		t.Errorf("lockscope_acquisitions_total = %v, want 1: the redsync lock, no counter", n)
	}
}

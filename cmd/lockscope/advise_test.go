package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestAdviseThroughTheBinary drives, against one real 'lockscope serve',
// a workload for each advice kind whose right answer is known, each beside
// the same workload made healthy (a class of its own): serve's advice, its
// classes JSON and 'lockscope advise' must name exactly the unhealthy
// classes, each with its kind, and none of the healthy ones.
func TestAdviseThroughTheBinary(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL()}
	base, _ := serveReady(t, env, "--watch", "py:*")
	ctx, stop := context.WithCancel(redistest.Context(t))
	defer stop()
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{FlushInterval: 10 * time.Millisecond})
	defer em.Close(context.Background())
	client := func(owner string) *lock.Client { return lock.New(rdb, &lock.Options{Owner: owner, Recorder: em}) }

	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	// each runs n workers of f at once.
	each := func(n int, f func(i int) error) {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f(i); err != nil && ctx.Err() == nil {
					errs <- err
				}
			}()
		}
	}
	// holdFor takes key for ttl, works for d (the workload: how long the
	// work under the lock takes), refreshes after refreshAt if set, and
	// releases.
	holdFor := func(c *lock.Client, key string, ttl, d, refreshAt time.Duration) error {
		l, err := c.Obtain(ctx, key, ttl, nil)
		if err != nil {
			return fmt.Errorf("Obtain(%q) = %v", key, err)
		}
		if refreshAt > 0 {
			time.Sleep(refreshAt)
			if err := l.Refresh(ctx, ttl); err != nil {
				return fmt.Errorf("Refresh(%q) = %v", key, err)
			}
		}
		time.Sleep(d)
		l.Release(context.Background()) // after an expiry it is gone: that is the point of ttl_short
		return nil
	}

	// ttl_short: 1.8 s of work under a 2 s TTL, no renewal; healthy: 1 s under 5 s.
	each(20, func(i int) error {
		return holdFor(client("report"), fmt.Sprintf("tshort:%d", i), 2*time.Second, 1800*time.Millisecond, 0)
	})
	each(20, func(i int) error {
		return holdFor(client("report"), fmt.Sprintf("tshortok:%d", i), 5*time.Second, time.Second, 0)
	})
	// ttl_long: a moment of work under a 5 min TTL; healthy: under 5 s.
	each(20, func(i int) error { return holdFor(client("mailer"), fmt.Sprintf("tlong:%d", i), 5*time.Minute, 0, 0) })
	each(20, func(i int) error { return holdFor(client("mailer"), fmt.Sprintf("tlongok:%d", i), 5*time.Second, 0, 0) })
	// ttl_mismatch: two services, 2 s and 20 s; healthy: both 5 s.
	each(20, func(i int) error {
		ttl, who := 2*time.Second, "svc-a"
		if i%2 == 1 {
			ttl, who = 20*time.Second, "svc-b"
		}
		return holdFor(client(who), fmt.Sprintf("tmis:%d", i), ttl, 0, 0)
	})
	each(20, func(i int) error { return holdFor(client("svc-a"), fmt.Sprintf("tmisok:%d", i), 5*time.Second, 0, 0) })
	// renew_late: renewed with 40% of a 3 s TTL left; healthy: with 83% left.
	each(20, func(i int) error {
		return holdFor(client("sync"), fmt.Sprintf("renew:%d", i), 3*time.Second, 0, 1800*time.Millisecond)
	})
	each(20, func(i int) error {
		return holdFor(client("sync"), fmt.Sprintf("renewok:%d", i), 3*time.Second, 0, 500*time.Millisecond)
	})
	// wait_budget_short: callers give up after 200 ms while a hold lasts
	// 3 s; healthy: they wait up to 10 s behind a hold that ends once all
	// 20 are seen waiting (so that each of them contended).
	budget := func(key string, deadline time.Duration, healthy bool) error {
		start := time.Now()
		l, err := client("holder").Obtain(ctx, key, 10*time.Second, nil)
		if err != nil {
			return err
		}
		var callers sync.WaitGroup
		for range 20 {
			callers.Add(1)
			go func() {
				defer callers.Done()
				cctx, cancel := context.WithTimeout(ctx, deadline)
				defer cancel()
				if l, err := client("api").Obtain(cctx, key, 10*time.Second, &lock.ObtainOptions{Retry: lock.LinearBackoff(20 * time.Millisecond)}); err == nil {
					l.Release(context.Background())
				}
			}()
		}
		if healthy {
			if !redistest.Poll(ctx, func() bool {
				_, body, err := get(ctx, base+"/api/v1/locks/"+key)
				return err == nil && strings.Contains(body, `"waiters":20,`)
			}) {
				return ctx.Err()
			}
		} else {
			callers.Wait() // all gave up
			time.Sleep(3*time.Second - time.Since(start))
		}
		l.Release(context.Background())
		callers.Wait()
		return nil
	}
	each(1, func(int) error { return budget("wbs:1", 200*time.Millisecond, false) })
	each(1, func(int) error { return budget("wbsok:1", 10*time.Second, true) })
	// single_key_bottleneck: five workers take turns on one key, each
	// holding it 300 ms, until the advice is seen; healthy: a key each.
	bottleneck := func(key func(i int) string) {
		each(5, func(i int) error {
			c := client(fmt.Sprintf("editor-%d", i))
			for ctx.Err() == nil {
				l, err := c.Obtain(ctx, key(i), 5*time.Second, &lock.ObtainOptions{Retry: lock.LinearBackoff(2 * time.Millisecond)})
				if err != nil {
					return nil // the test is over
				}
				time.Sleep(300 * time.Millisecond)
				l.Release(context.Background())
			}
			return nil
		})
	}
	bottleneck(func(int) string { return "docs:global" })
	bottleneck(func(i int) string { return fmt.Sprintf("docsok:%d", i) })
	// no_expiry: a redis-py lock taken without a timeout, watched; healthy: with one.
	if err := rdb.SetNX(ctx, "py:nightly", "f38f5694e9a511f18bee02fc00000001", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SetNX(ctx, "py:hourly", "f38f5694e9a511f18bee02fc00000002", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	want := []string{
		"docs:global single_key_bottleneck", "py:nightly no_expiry", "renew:* renew_late", "tlong:* ttl_long",
		"tmis:* ttl_mismatch", "tshort:* ttl_short", "wbs:* wait_budget_short",
	}
	redistest.WaitFor(t, 90*time.Second, "serve's advice to name exactly the unhealthy classes", func() error {
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		_, body, err := get(ctx, base+"/api/v1/advice")
		if err != nil {
			return err
		}
		var v struct {
			Advice []struct{ Class, Kind string } `json:"advice"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			return fmt.Errorf("GET /api/v1/advice: %v %.200s", err, body)
		}
		var got []string
		for _, a := range v.Advice {
			got = append(got, a.Class+" "+a.Kind)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("advice %q, want %q", got, want)
		}
		return nil
	})

	// The classes JSON, to the count, for two of the known workloads.
	_, body, err := get(ctx, base+"/api/v1/classes?q=tmis")
	if err != nil {
		t.Fatal(err)
	}
	var cl struct {
		Classes []struct {
			Class        string           `json:"class"`
			Acquisitions int64            `json:"acquisitions"`
			Contentions  int64            `json:"contentions"`
			Failures     map[string]int64 `json:"failures"`
			SuccessRatio *float64         `json:"success_ratio"`
			Hold         struct{ Count int64 }
			TTLs         []struct {
				Seconds      float64 `json:"seconds"`
				Acquisitions int64   `json:"acquisitions"`
			} `json:"ttls"`
			Held        int    `json:"held"`
			Expirations int64  `json:"expirations"`
			Advice      int    `json:"advice"`
			HotKey      string `json:"hot_key"`
		} `json:"classes"`
	}
	if err := json.Unmarshal([]byte(body), &cl); err != nil || len(cl.Classes) != 2 {
		t.Fatalf("GET /api/v1/classes?q=tmis = %v %s; want tmis:* and tmisok:*", err, body)
	}
	tm := cl.Classes[0]
	if tm.Class != "tmis:*" || tm.Acquisitions != 20 || tm.Contentions != 0 || tm.Failures["timeout"]+tm.Failures["held"]+tm.Failures["error"]+tm.Failures["canceled"] != 0 ||
		tm.SuccessRatio == nil || *tm.SuccessRatio != 1 || tm.Hold.Count != 20 || tm.Held != 0 || tm.Expirations != 0 || tm.Advice != 1 ||
		len(tm.TTLs) != 2 || tm.TTLs[0].Acquisitions != 10 || tm.TTLs[1].Acquisitions != 10 ||
		!slices.Equal([]float64{min(tm.TTLs[0].Seconds, tm.TTLs[1].Seconds), max(tm.TTLs[0].Seconds, tm.TTLs[1].Seconds)}, []float64{2, 20}) {
		t.Errorf("tmis:* = %+v; want 20 acquisitions, none contended or failed, 20 holds, TTLs 2 s ×10 and 20 s ×10, 1 advice", tm)
	}
	_, body, _ = get(ctx, base+"/api/v1/classes?q=wbs")
	if err := json.Unmarshal([]byte(body), &cl); err != nil || len(cl.Classes) != 2 {
		t.Fatalf("GET /api/v1/classes?q=wbs = %v %s", err, body)
	}
	for _, c := range cl.Classes {
		switch c.Class {
		case "wbs:*":
			if c.Acquisitions != 1 || c.Failures["timeout"] != 20 || c.Hold.Count != 1 || *c.SuccessRatio != 1.0/21 || c.Advice != 1 {
				t.Errorf("wbs:* = %+v; want 1 acquisition, 20 timeouts, success 1/21, 1 advice", c)
			}
		case "wbsok:*":
			if c.Acquisitions != 21 || c.Contentions != 20 || c.Failures["timeout"] != 0 || *c.SuccessRatio != 1 || c.Advice != 0 || c.HotKey != "wbsok:1" {
				t.Errorf("wbsok:* = %+v; want 21 acquisitions, 20 of them contended, no failure, hot key wbsok:1, no advice", c)
			}
		}
	}

	// lockscope advise: the same advice, in a terminal, exit 1.
	out, errOut, code := lockscope(t, nil, "", "advise", "--url", base)
	if code != 1 || !strings.Contains(errOut, "7 advice for 7 classes") {
		t.Errorf("advise: exit %d, stderr %q; want 1 and \"7 advice for 7 classes\"", code, errOut)
	}
	for _, w := range want {
		class, kind, _ := strings.Cut(w, " ")
		if !strings.Contains(out, "  "+class+"  "+kind+"\n") {
			t.Errorf("advise output lacks %s %s:\n%s", class, kind, out)
		}
	}
	advice, _, _ := strings.Cut(out, "Waits unknown") // which names the watched classes, healthy or not
	for _, healthy := range []string{"tshortok", "tlongok", "tmisok", "renewok", "wbsok", "docsok", "py:hourly"} {
		if strings.Contains(advice, healthy) {
			t.Errorf("advise names the healthy %s:\n%s", healthy, out)
		}
	}
	if !strings.Contains(out, "WARNING  tshort:*  ttl_short\n") || !strings.Contains(out, "INFO     tlong:*  ttl_long\n") ||
		!strings.Contains(out, "fires above 1% of at least 20") || !strings.Contains(out, "suggestion: ") ||
		!strings.Contains(out, "Waits unknown (watched locks") {
		t.Errorf("advise output lacks severities, thresholds, suggestions or the classes of unknown waits:\n%s", out)
	}
	// A healthy class alone: exit 0. JSON: the API's.
	out, _, code = lockscope(t, nil, "", "advise", "--url", base, "--class", "tshortok:*")
	if code != 0 || !strings.Contains(out, "No advice: 1 class judged") {
		t.Errorf("advise --class tshortok:*: exit %d\n%s\nwant 0, no advice for 1 class", code, out)
	}
	out, _, code = lockscope(t, nil, "", "advise", "--url", base, "--class", "tlong:*", "--json", "--window", "1h")
	var j struct {
		Window string                              `json:"window"`
		Advice []struct{ Kind, Suggestion string } `json:"advice"`
	}
	if code != 1 || json.Unmarshal([]byte(out), &j) != nil || j.Window != "1h" || len(j.Advice) != 1 || j.Advice[0].Kind != "ttl_long" ||
		!strings.Contains(j.Advice[0].Suggestion, "auto-renew") {
		t.Errorf("advise --json --window 1h --class tlong:*: exit %d\n%s\nwant 1 and the ttl_long advice for 1h", code, out)
	}
	// Errors exit 2, never 1.
	for _, args := range [][]string{{"--url", "http://" + freeAddr(t)}, {"--url", base, "--window", "2m"}, {"--url", "ftp://x"}} {
		_, errOut, code := lockscope(t, nil, "", append([]string{"advise"}, args...)...)
		if code != 2 || !strings.HasPrefix(errOut, "lockscope advise: ") {
			t.Errorf("advise %q: exit %d, stderr %q; want 2 with one line", args, code, errOut)
		}
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}
}

// TestAdviseWithReadCredentials: against a serve that requires credentials
// for reading, advise says which flag is missing (exit 2), and reads with
// the operator token.
func TestAdviseWithReadCredentials(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	const token = "s3cret-token-0123"
	base, _ := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_OPERATOR_TOKEN=" + token}, "--require-auth-for-read")
	_, errOut, code := lockscope(t, nil, "", "advise", "--url", base)
	if code != 2 || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "--operator-token") {
		t.Errorf("advise without a token: exit %d, %q; want 2, the 401 and the flag to set", code, errOut)
	}
	out, errOut, code := lockscope(t, []string{"LOCKSCOPE_OPERATOR_TOKEN=" + token}, "", "advise", "--url", base)
	if code != 0 || !strings.Contains(out, "No advice: 0 classes judged over the last 5m") {
		t.Errorf("advise with the token: exit %d\n%s%s\nwant 0 and no advice", code, out, errOut)
	}
}

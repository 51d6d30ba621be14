package main

import (
	"context"
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestWatchStarTakesNoRandomTokenForALock: `serve --watch 'nr:*' --watch
// '*' --stuck-after 1s` over sessions whose values are random tokens (32
// hex digits, base64 of 16 bytes, with a TTL of an hour, as node-redlock's
// and redsync's locks look) and two locks held past the threshold: a
// node-redlock token under 'nr:*' (a pattern that names lock keys) and a
// redis-py uuid1 under '*' (a shape that names its library). Exactly the
// two locks are held and stuck; the sessions are neither (before, '*' took
// them for node-redlock and redsync locks, and LockStuck fired for them).
func TestWatchStarTakesNoRandomTokenForALock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	base, _ := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL()}, "--watch", "nr:*", "--watch", "*", "--stuck-after", "1s")
	sessions := map[string]string{"sess:hex": "9f0e4c2b7a1d8e3f6b5a4c3d2e1f0a9b", "sess:b64": "q1Jx0m8ZbQ7yC4wXr2T9Uw=="}
	for key, v := range sessions {
		rdb.Set(ctx, key, v, time.Hour)
	}
	rdb.Set(ctx, "nr:report", "0b1c2d3e4f5a69788796a5b4c3d2e1f0", time.Hour)
	rdb.Set(ctx, "py:invoice", "5f0c6e1aa7e211ef9c2b0242ac120002", time.Hour)
	var stuck float64
	redistest.WaitFor(t, 30*time.Second, "the two locks stuck", func() bool {
		_, body, err := get(ctx, base+"/metrics")
		stuck, _ = metricSum(body, "lockscope_stuck_locks")
		return err == nil && stuck >= 2
	})
	if stuck != 2 {
		t.Errorf("lockscope_stuck_locks = %v, want 2 (nr:report, py:invoice)", stuck)
	}
	held := func(key string) bool {
		t.Helper()
		_, body, err := get(ctx, base+"/api/v1/locks/"+url.PathEscape(key))
		var v struct {
			Held bool `json:"held"`
		}
		if err != nil || json.Unmarshal([]byte(body), &v) != nil {
			t.Fatalf("GET /api/v1/locks/%s: %v %s", key, err, body)
		}
		return v.Held
	}
	for _, key := range []string{"nr:report", "py:invoice"} {
		if !held(key) {
			t.Errorf("%s not held, want held", key)
		}
	}
	for key := range sessions {
		if held(key) {
			t.Errorf("%s (a session of a random token under '*') held, want no lock", key)
		}
	}
}

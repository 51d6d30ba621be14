package collector

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector/internal/evtest"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// The compare-and-delete redis-py's Lock.release runs (and redislock,
// redsync and node-redlock run the same shape).
const luaRelease = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// redis-py's Lock.extend(replace_ttl=True).
const luaExtend = `if redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end redis.call("pexpire", KEYS[1], ARGV[2]) return 1`

func waitSynced(t *testing.T, c *running, n int64) {
	t.Helper()
	redistest.WaitFor(t, waitLimit, "watcher subscribed and rescanned", func() bool { return c.synced.Load() >= n })
}

func lockInfo(agg *state.Aggregator, key string) state.LockInfo {
	d, _ := agg.Lock(key)
	return d.LockInfo
}

func TestWatchPassiveLocksOfOtherLibraries(t *testing.T) {
	srv := redistest.Shared(t) // notify-keyspace-events KEA
	rdb := srv.Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)

	// Held before the collector starts: found by the start-up rescan.
	early, earlyToken := prefix+"py:early", "5f0c6e1aa7e211ef9c2b0242ac120002"
	if err := rdb.Set(ctx, early, earlyToken, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	agg, reg := testAgg(t, state.Config{})
	c := startFollower(t, rdb, agg, &Options{
		Stream: prefix + "events",
		// Overlapping on purpose; SETNX locks of old clients hold a
		// host name, taken for a lock by the "=ttl" rule.
		Watch: []string{prefix + "py:*", prefix + "nx:*=ttl", prefix + "*"},
	})
	waitSynced(t, c, 1)
	// The watcher's events come back through the stream.
	redistest.WaitFor(t, waitLimit, "the lock held before start found", func() bool {
		li := lockInfo(agg, early)
		return li.Held && li.Owner == lock.ForeignOwner(earlyToken) && li.Passive
	})

	// redis-py: SET key token NX PX 3000, extend, Lua compare-and-delete.
	py := prefix + "py:job:1"
	for i, token := range []string{"2b7c0a4e9f3d4c1a8e6b5d7f9a1c3e5b", "b1d2c3e4f5a6978812345678abcdef00", "0123456789abcdef0123456789abcdef"} {
		set := time.Now()
		ok, err := rdb.SetNX(ctx, py, token, 3*time.Second).Result()
		if err != nil || !ok {
			t.Fatalf("SET NX PX = %v, %v", ok, err)
		}
		redistest.WaitFor(t, waitLimit, "redis-py lock held", func() bool {
			li := lockInfo(agg, py)
			return li.Held && li.Owner == lock.ForeignOwner(token)
		})
		if li := lockInfo(agg, py); !li.Passive || li.TTL <= 2*time.Second || li.TTL > 3*time.Second {
			t.Errorf("round %d: Lock(py) = {Passive:%v TTL:%v}, want passive with TTL ~3s", i, li.Passive, li.TTL)
		}
		if err := rdb.Eval(ctx, luaExtend, []string{py}, token, 20000).Err(); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, waitLimit, "extended TTL", func() bool { return lockInfo(agg, py).TTL > 10*time.Second })
		// The renewal's headroom, as the watcher saw it: the 3 s set at
		// (after) set, less the time the renewal was seen by (before now).
		if h, lo := lockInfo(agg, py).LastHeadroom, time.Until(set.Add(3*time.Second-time.Millisecond)); h < lo || h > 3*time.Second {
			t.Errorf("round %d: extension headroom = %v, want within [%v, 3s]", i, h, lo)
		}
		if n, err := rdb.Eval(ctx, luaRelease, []string{py}, token).Int(); err != nil || n != 1 {
			t.Fatalf("release script = %v, %v; want 1", n, err)
		}
		redistest.WaitFor(t, waitLimit, "redis-py lock released", func() bool { return !lockInfo(agg, py).Held })
	}

	// Old clients: SETNX, then EXPIRE, then DEL.
	nx := prefix + "nx:report"
	if err := rdb.Do(ctx, "SETNX", nx, "cron@host-7").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Expire(ctx, nx, 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, waitLimit, "SETNX lock held with its TTL", func() bool {
		li := lockInfo(agg, nx)
		return li.Held && li.Owner == lock.ForeignOwner("cron@host-7") && li.TTL > 20*time.Second
	})
	if err := rdb.Del(ctx, nx).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, waitLimit, "SETNX lock released", func() bool { return !lockInfo(agg, nx).Held })

	// Locks written by lockscope itself report through the stream: skipped.
	own := prefix + "py:own"
	if err := rdb.Set(ctx, own, "ls1|tokentokentokentokent|0123456789abcdef|0|1700000000000|app/host/1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	// An expiring foreign lock; notifications arrive in order, so once it
	// is seen the lockscope value before it has been handled.
	exp := prefix + "py:expiring"
	const doomed = "Zk3vQ9bN2xT7Lp0sWm4RcA" // redislock's
	if err := rdb.SetNX(ctx, exp, doomed, 100*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, waitLimit, "expiration confirmed", func() bool {
		for _, e := range agg.Expirations(10) {
			if e.Key == exp {
				return true
			}
		}
		return false
	})
	if _, ok := agg.Lock(own); ok {
		t.Errorf("Lock(own) is tracked; want lockscope's own value skipped by the passive watch")
	}
	for _, e := range agg.Expirations(10) {
		if e.Key == exp && (!e.Confirmed || e.Owner != lock.ForeignOwner(doomed)) {
			t.Errorf("Expirations()[%q] = {Confirmed:%v Owner:%q}, want confirmed, owner doomed", exp, e.Confirmed, e.Owner)
		}
	}
	if err := rdb.Del(ctx, early).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, waitLimit, "early lock released", func() bool { return !lockInfo(agg, early).Held })

	// redis-py 3 + SETNX 1 + expiring 1; early was found held by the
	// start-up scan, not seen acquired: held, released, not an acquisition.
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"lockscope_acquisitions_total", nil, 5},
		{"lockscope_releases_total", []string{"outcome", "released"}, 5},
		{"lockscope_expirations_total", nil, 1},
		{"lockscope_held_locks", nil, 0},
	}
	for _, c := range checks {
		if got := metric(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// early's scan, 3 extends, plus the SETNX's EXPIRE when the watcher read
	// the value before EXPIRE ran; never the "expire" SET PX raises with its
	// "set".
	if got := metric(t, reg, "lockscope_events_total", "type", "renewed"); got != 4 && got != 5 {
		t.Errorf("lockscope_events_total{type=renewed} = %v, want 4 or 5", got)
	}
}

func TestWatchWithoutNotificationsSaysWhatToConfigure(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Notify: "none"})
	admin := srv.Client(t)
	ctx := context.Background()
	// A collector user that may do everything but CONFIG, as on a managed
	// Redis.
	if err := admin.Do(ctx, "ACL", "SETUSER", "collector", "on", ">secret", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "collector", Password: "secret"})
	t.Cleanup(func() { rdb.Close() })

	clock := evtest.NewClock()
	clock.Set(time.Unix(1_700_000_000, 0))
	var logs logBuffer
	agg, reg := testAgg(t, state.Config{Now: clock.Now, ExpiryGrace: time.Second})
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	c := startFollower(t, rdb, agg, &Options{Stream: stream, Watch: []string{"lock:*"}, Logger: logs.logger(), Now: clock.Now})
	waitSynced(t, c, 1)

	lines := logs.lines("cannot read or set notify-keyspace-events")
	if len(lines) != 1 || !strings.Contains(lines[0], "NOPERM") || !strings.Contains(lines[0], `need=ExK$gh`) || !strings.Contains(lines[0], "notify-keyspace-events ExK$gh`") {
		t.Errorf("refusal log = %q, want one line naming the error and the flags ExK$gh to configure", lines)
	}
	if got, err := admin.ConfigGet(ctx, "notify-keyspace-events").Result(); err != nil || got["notify-keyspace-events"] != "" {
		t.Errorf("notify-keyspace-events = %q, %v; want untouched", got, err)
	}

	// Expiry is still detected from the TTL.
	key := prefix + "held"
	xaddSingle(t, rdb, stream, event.Event{Type: event.Acquired, Key: key, Owner: "app", Lease: "l1", TS: clock.Now().UnixNano(), TTL: 2 * time.Second, Attempts: 1})
	redistest.WaitFor(t, waitLimit, "lock held", func() bool { return lockInfo(agg, key).Held })
	clock.Add(5 * time.Second)
	redistest.WaitFor(t, waitLimit, "expiry detected by Tick", func() bool { return metric(t, reg, "lockscope_expirations_total") == 1 })
	ex := agg.Expirations(10)
	if len(ex) != 1 || ex[0].Key != key || ex[0].Confirmed {
		t.Errorf("Expirations() = %+v, want one unconfirmed expiration of %q", ex, key)
	}
}

func TestWatchEnablesNotificationsAndKeepsExistingFlags(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Notify: "Kl"})
	rdb := srv.Client(t)
	ctx := context.Background()
	var logs logBuffer
	agg, _ := testAgg(t, state.Config{})
	c := startFollower(t, rdb, agg, &Options{Stream: "events", Watch: []string{"lock:*"}, Logger: logs.logger()})
	waitSynced(t, c, 1)

	flags := func() string {
		v, err := rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v["notify-keyspace-events"]
	}
	want := func(when string) {
		t.Helper()
		got := flags()
		if missing := missingFlags(got, "lKE$gx"); missing != "" {
			t.Errorf("%s: notify-keyspace-events = %q, missing %q", when, got, missing)
		}
	}
	want("after start")
	if l := logs.lines("enabled keyspace notifications"); len(l) != 1 {
		t.Errorf("log lines about enabling = %q, want 1", l)
	}
	if err := rdb.SetNX(ctx, "lock:a", "q1Jx0m8ZbQ7yC4wXr2T9Uw==", 50*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, waitLimit, "confirmed expiration", func() bool {
		ex := agg.Expirations(1)
		return len(ex) == 1 && ex[0].Key == "lock:a" && ex[0].Confirmed
	})

	// A restarted Redis forgets CONFIG SET and every key: the watcher
	// configures it again, and its rescan finds the held lock gone.
	if err := rdb.SetNX(ctx, "lock:b", "9b1c3f0e2d4a5b6c7d8e9fa0b1c2d3e4", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, waitLimit, "lock:b held", func() bool { return lockInfo(agg, "lock:b").Held })
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, c, 2)
	want("after a Redis restart")
	// A passive release waits parkFor for a forced release that would
	// explain it, then applies.
	redistest.WaitFor(t, waitLimit, "lock:b released by the rescan", func() bool { return !lockInfo(agg, "lock:b").Held })
}

func TestWatchMiniredisHasNoNotifications(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	xaddPacked(t, rdb, "events", lockEvents([]string{"a", "b"}, 10, time.Now()))

	var logs logBuffer
	agg, _ := testAgg(t, state.Config{})
	startFollower(t, rdb, agg, &Options{Stream: "events", Watch: []string{"lock:*"}, Logger: logs.logger()})
	redistest.WaitFor(t, waitLimit, "events applied from miniredis", func() bool { return eventsTotal(agg) >= 40 })
	redistest.WaitFor(t, waitLimit, "log about missing notifications", func() bool { return len(logs.lines("sends no keyspace notifications")) == 1 })
	xaddPacked(t, rdb, "events", lockEvents([]string{"c"}, 5, time.Now()))
	redistest.WaitFor(t, waitLimit, "more events applied", func() bool { return eventsTotal(agg) >= 50 })
	if got := eventsTotal(agg); got != 50 {
		t.Errorf("EventsTotal = %d, want 50", got)
	}
	if err := agg.Health(); err != nil {
		t.Errorf("Health() = %v, want nil", err)
	}
}

func TestMissingFlags(t *testing.T) {
	tests := []struct{ cur, need, want string }{
		{"", "Ex", "Ex"},
		{"AKE", "ExK$gx", ""},
		{"KEA", "ExK$gx", ""},
		{"Kl", "ExK$g", "Ex$g"},
		{"Ex", "ExK$g", "K$g"},
		{"", "ExK$gx", "ExK$g"},
		{"KA", "Ex", "E"},
	}
	for _, tt := range tests {
		if got := missingFlags(tt.cur, tt.need); got != tt.want {
			t.Errorf("missingFlags(%q, %q) = %q, want %q", tt.cur, tt.need, got, tt.want)
		}
	}
}

// A wide pattern matches keys that are no locks: lockscope's own (the
// stream's, the fence counters), plain values without a TTL (configuration)
// and with one (a session, a rate-limit counter, a host name some cron
// SETNXes). By default only a known library's token is taken for a lock,
// with or without a TTL (a redis-py Lock without timeout: held, never
// expiring); "=ttl" takes any value with a TTL too, "=any" (and the older
// WatchNoTTL) any value.
func TestWatchWidePatternTakesNoPlainKeyForALock(t *testing.T) {
	const pyToken = "5f0c6e1aa7e211ef9c2b0242ac120002"
	for _, tc := range []struct {
		name  string
		watch string
		noTTL bool
		want  []string
	}{
		{"tokens only", "*", false, []string{"job:1", "py:lock"}},
		{"=ttl", "*=ttl", false, []string{"job:1", "nx:lock", "py:lock", "rate:1", "sess:1"}},
		{"=any", "*=any", false, []string{"cfg:plain", "job:1", "nx:lock", "py:lock", "rate:1", "sess:1"}},
		{"WatchNoTTL", "*", true, []string{"cfg:plain", "job:1", "nx:lock", "py:lock", "rate:1", "sess:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			rdb := srv.Client(t)
			ctx := context.Background()
			stream := "lockscope:events"
			agg, _ := testAgg(t, state.Config{StuckAfter: time.Second})
			c := startFollower(t, rdb, agg, &Options{Stream: stream, Replica: "w", Watch: []string{tc.watch}, WatchNoTTL: tc.noTTL})
			waitSynced(t, c, 1)
			em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream, FlushInterval: 10 * time.Millisecond})
			defer em.Close(ctx)
			lc := lock.New(rdb, &lock.Options{Owner: "app", Recorder: em})
			if _, err := lc.Obtain(ctx, "job:1", time.Minute, &lock.ObtainOptions{Fencing: true}); err != nil { // writes a fence counter
				t.Fatal(err)
			}
			rdb.Set(ctx, "cfg:plain", "v", 0)
			rdb.Set(ctx, "sess:1", `{"user":42,"cart":[7,9]}`, 30*time.Minute)
			rdb.Set(ctx, "rate:1", "17", time.Minute)
			rdb.Set(ctx, "py:lock", pyToken, 0) // a redis-py Lock without timeout
			rdb.Set(ctx, "nx:lock", "cron@host-7", 30*time.Second)
			// Written last, a lock in every mode: one goroutine handles the
			// notifications in order, so once it is seen so is every one
			// before it.
			rdb.Set(ctx, "zz:last", pyToken, time.Minute)
			redistest.WaitFor(t, waitLimit, "the real locks seen", func() bool {
				return lockInfo(agg, "py:lock").Held && lockInfo(agg, "job:1").Held && lockInfo(agg, "zz:last").Held
			})
			var held []string
			for _, l := range agg.Locks(state.LockQuery{HeldOnly: true, Limit: 500}).Locks {
				if l.Key != "zz:last" {
					held = append(held, l.Key)
				}
			}
			slices.Sort(held)
			if !slices.Equal(held, tc.want) {
				t.Errorf("held = %q, want %q (never the stream's keys or fence counters)", held, tc.want)
			}
			if li := lockInfo(agg, "py:lock"); !li.NoExpiry() || li.Owner != lock.ForeignOwner(pyToken) {
				t.Errorf("py:lock = %+v, want held without expiry by %s", li, lock.ForeignOwner(pyToken))
			}
			// Counted by the aggregator's next scan of the held keys.
			want := 0
			for _, k := range tc.want {
				if k == "py:lock" || k == "cfg:plain" {
					want++
				}
			}
			redistest.WaitFor(t, waitLimit, fmt.Sprintf("%d locks without expiry", want), func() bool {
				n := 0
				for _, g := range agg.ClassGauges() {
					n += g.NoExpiry
				}
				return n == want
			})
		})
	}
}

// ParseWatch takes a kind only after the last '=' and only a known one; a
// '=' that is part of a pattern stays in it.
func TestParseWatch(t *testing.T) {
	for _, tc := range []struct{ in, pattern, kind, err string }{
		{"lock:*", "lock:*", "", ""},
		{"jobs:*=ttl", "jobs:*", "ttl", ""},
		{"*=any", "*", "any", ""},
		{"sem:*=semaphore", "sem:*", "semaphore", ""},
		{"a=b:*", "a=b:*", "", ""},
		{`lock:a\=b`, `lock:a\=b`, "", ""},
		{"lock:*=tll", "", "", `unknown kind "tll"`},
		{"lock:*=", "", "", `unknown kind ""`},
		{"=ttl", "", "", "no pattern"},
	} {
		p, k, err := ParseWatch(tc.in)
		if p != tc.pattern || k != tc.kind || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseWatch(%q) = %q, %q, %v; want %q, %q, error containing %q", tc.in, p, k, err, tc.pattern, tc.kind, tc.err)
		}
	}
}

// A key is a semaphore's when the first pattern it matches says so: the
// watcher's rule, which the dashboard follows too.
func TestSemaphoreMatcher(t *testing.T) {
	if m := SemaphoreMatcher([]string{"lock:*", "jobs:*=ttl"}); m != nil {
		t.Fatal("SemaphoreMatcher without a semaphore rule is not nil")
	}
	m := SemaphoreMatcher([]string{"lock:*", "sem:*=semaphore", "*"})
	for key, want := range map[string]bool{"sem:exports": true, "lock:sem:x": false, "session:1": false, "sem": false} {
		if got := m(key); got != want {
			t.Errorf("semaphore(%q) = %v, want %v", key, got, want)
		}
	}
	if m := SemaphoreMatcher([]string{"*", "sem:*=semaphore"}); m("sem:exports") {
		t.Error("a key matching an earlier pattern without a kind is a semaphore's")
	}
}

// A pattern names a family of keys when it has literal text: then a random
// token (node-redlock's, redsync's, redislock's) under it is a lock; a
// pattern of wildcards alone matches sessions and API keys too.
func TestNamesKeys(t *testing.T) {
	for p, want := range map[string]bool{
		"*": false, "**": false, "?*": false, "[a-z]*": false, `[\]]*`: false,
		"lock:*": true, "*:lock": true, "a": true, `\*`: true, "[ab]x*": true,
	} {
		if got := namesKeys(p); got != want {
			t.Errorf("namesKeys(%q) = %v, want %v", p, got, want)
		}
	}
}

package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/internal/testkit/syncbuf"
	"github.com/lockscope/lockscope/lock"
)

// passiveView is what replicas must agree on about watched locks: each
// key's holder, since and stuck flag with its recent expirations, the
// overview's held, stuck and expiration counts, and the hot keys (when
// asked: a restarted replica's windows hold only what it replayed).
type passiveView struct {
	Held          int
	Stuck         int
	Expirations5m int64
	Keys          map[string]passiveKey
	Hot           []passiveHot
}

// passiveHot is a watched key in the hot keys: its acquisitions, its
// contention unknown (null).
type passiveHot struct {
	Key          string
	Acquisitions int64
	Contentions  *int64
}

type passiveKey struct {
	Held        bool
	Owner       string
	Since       time.Time
	Stuck       bool
	Expirations []time.Time // its recent expired events
}

// passiveViewOf reads p's view of keys: each key's expirations from after
// since (a restarted replica's key history is what it replayed), the hot
// keys if hot.
func passiveViewOf(ctx context.Context, p *proc, keys []string, since time.Time, hot bool) (passiveView, error) {
	var v passiveView
	var o replicaView
	if err := getJSONCtx(ctx, p.url("/api/v1/overview"), &o); err != nil {
		return v, err
	}
	if !o.Ingesting {
		return v, fmt.Errorf("not ingesting: %s", o.IngestError)
	}
	v.Held, v.Stuck, v.Expirations5m = o.Held, o.Stuck, o.Expirations5m
	v.Keys = make(map[string]passiveKey)
	for _, k := range keys {
		var d struct {
			Held   bool      `json:"held"`
			Owner  string    `json:"owner"`
			Since  time.Time `json:"since"`
			Stuck  bool      `json:"stuck"`
			Recent []struct {
				Type string    `json:"type"`
				At   time.Time `json:"at"`
			} `json:"recent"`
		}
		if err := getJSONCtx(ctx, p.url("/api/v1/locks/"+url.PathEscape(k)), &d); err != nil {
			return v, err
		}
		pk := passiveKey{Held: d.Held, Owner: d.Owner, Since: d.Since, Stuck: d.Stuck}
		for _, e := range d.Recent {
			if e.Type == "expired" && !e.At.Before(since) {
				pk.Expirations = append(pk.Expirations, e.At)
			}
		}
		v.Keys[k] = pk
	}
	if hot {
		var h struct {
			Keys []passiveHot `json:"keys"`
		}
		if err := getJSONCtx(ctx, p.url("/api/v1/hotkeys?window=5m&n=100"), &h); err != nil {
			return v, err
		}
		v.Hot = h.Keys
	}
	return v, nil
}

func getJSONCtx(ctx context.Context, u string, v any) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// pyLockScript holds a redis-py Lock (Debian's python3-redis) taken with a
// 4 s timeout and extended every second (its extend script: PEXPIRE), and
// prints its token.
const pyLockScript = `
import sys, time, redis
r = redis.Redis(port=int(sys.argv[1]))
l = r.lock(sys.argv[2], timeout=4)
assert l.acquire(blocking=False)
print(l.local.token.decode(), flush=True)
while True:
    time.sleep(1)
    l.extend(4, replace_ttl=True)
`

// holdWithRedisPy runs pyLockScript on key until the test ends and returns
// the lock's token.
func holdWithRedisPy(t *testing.T, port int, key string) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", pyLockScript, strconv.Itoa(port), key)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncbuf.Buffer // written by exec's goroutine while we may read it
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-py (Debian's python3-redis, scripts/deps.sh): %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var token string
	if _, err := fmt.Fscanln(out, &token); err != nil {
		t.Fatalf("redis-py lock on %s: %v\n%s", key, err, stderr.String())
	}
	return token
}

// TestReplicasAgreeOnPassiveLocksAcrossSIGKILLs runs two serve replicas with
// the same --watch flags while other libraries' locks are held and renewed:
// a redsync mutex extended every second (SET NX PX, then its extend script's
// PEXPIRE), a redis-py Lock extended every second (a real Python process)
// and a plain SET NX PX kept alive by PEXPIRE, all older than --backfill, plus short locks that come and go and one that expires. Each
// replica is SIGKILLed in turn and restarted: within 5 s it must show what
// the other shows (holders, since to the nanosecond, stuck flags, each key's
// expirations, the overview's counts), and both what Redis holds.
func TestReplicasAgreeOnPassiveLocksAcrossSIGKILLs(t *testing.T) {
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := testCtx(t, 3*time.Minute)
	flags := []string{"--watch", "pl:*", "--backfill", "2s", "--stuck-after", "4s"}

	a := startServe(t, bin, srv.URL(), nil, flags...)
	b := startServe(t, bin, srv.URL(), nil, flags...)

	// redsync, command for command: its Lock and its Extend script.
	rs := redsync.New(goredis.NewPool(rdb))
	mutex := rs.NewMutex("pl:redsync", redsync.WithExpiry(4*time.Second), redsync.WithTries(1))
	if err := mutex.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	plain, plainToken := "pl:plain", "9b1c3f0e2d4a5b6c7d8e9fa0b1c2d3e4"
	if ok, err := rdb.SetNX(ctx, plain, plainToken, 4*time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX PX = %v, %v", ok, err)
	}
	pyKey := "pl:redis-py"
	pyToken := holdWithRedisPy(t, srv.Port(), pyKey)
	var wg sync.WaitGroup
	rctx, stopRenewing := context.WithCancel(ctx)
	wg.Go(func() {
		for redistest.Sleep(rctx, time.Second) {
			if ok, err := mutex.ExtendContext(rctx); (err != nil || !ok) && rctx.Err() == nil {
				t.Errorf("redsync Extend = %v, %v", ok, err)
			}
			rdb.PExpire(rctx, plain, 4*time.Second)
		}
	})
	// Short locks that come and go, and one that expires while held.
	wg.Go(func() {
		for i := 0; redistest.Sleep(rctx, 700*time.Millisecond); i++ {
			key := "pl:short"
			tok := fmt.Sprintf("%032x", i+1)
			if ok, _ := rdb.SetNX(rctx, key, tok, 3*time.Second).Result(); ok {
				redistest.Sleep(rctx, 150*time.Millisecond)
				rdb.Eval(context.WithoutCancel(rctx), `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`, []string{key}, tok)
			}
			if i%5 == 2 {
				rdb.SetNX(rctx, "pl:crashed", fmt.Sprintf("%032x", 1000+i), 400*time.Millisecond)
			}
		}
	})
	defer func() { stopRenewing(); wg.Wait() }()
	keys := []string{"pl:redsync", plain, pyKey, "pl:short", "pl:crashed"}

	// agree waits until both replicas show the same, with the long locks
	// held by their holders, each key's expirations from since on, the hot
	// keys if hot.
	agree := func(what string, within time.Duration, since time.Time, hot bool) passiveView {
		t.Helper()
		start := time.Now()
		var va, vb passiveView
		var errA, errB error
		for time.Since(start) < within+10*time.Second {
			va, errA = passiveViewOf(ctx, a, keys, since, hot)
			vb, errB = passiveViewOf(ctx, b, keys, since, hot)
			if errA == nil && errB == nil && cmp.Equal(va, vb) &&
				va.Keys["pl:redsync"].Owner == "redsync "+lock.Fingerprint(mutex.Value())[:8] &&
				va.Keys[plain].Owner == lock.ForeignOwner(plainToken) &&
				va.Keys[pyKey].Owner == "redis-py "+lock.Fingerprint(pyToken)[:8] {
				took := time.Since(start)
				t.Logf("%s: both replicas agree after %v: held %d, stuck %d, expirations %d", what, took.Round(time.Millisecond), va.Held, va.Stuck, va.Expirations5m)
				if took > within {
					t.Errorf("%s: the replicas agreed after %v, want within %v", what, took.Round(time.Millisecond), within)
				}
				return va
			}
			redistest.Sleep(ctx, 100*time.Millisecond)
		}
		t.Fatalf("%s: after %v the replicas disagree (-a +b):\n%s\nerrors: %v, %v\na's log:\n%s\nb's log:\n%s", what, within+10*time.Second,
			cmp.Diff(va, vb), errA, errB, tail(a.out.String(), 2000), tail(b.out.String(), 2000))
		return va
	}

	// Past --backfill, --stuck-after and the 30 s after which a hold is
	// kept in the checkpoint: the long holds are older than what a
	// restarted replica replays, and stuck.
	redistest.Sleep(ctx, 32*time.Second)
	before := agree("both running", 2*time.Second, time.Time{}, true)
	// The watched keys rank in the hot keys by their acquisitions, their
	// contention unknown.
	for _, key := range []string{"pl:short", "pl:crashed"} {
		i := slices.IndexFunc(before.Hot, func(h passiveHot) bool { return h.Key == key })
		if i < 0 || before.Hot[i].Acquisitions < 2 || before.Hot[i].Contentions != nil {
			t.Errorf("hot keys = %+v, want %s with its acquisitions and contentions null", before.Hot, key)
		}
	}
	for _, key := range []string{"pl:redsync", plain, pyKey} {
		if k := before.Keys[key]; !k.Held || !k.Stuck {
			t.Errorf("%s = %+v, want held and stuck", key, k)
		}
	}

	for i, name := range []string{"a", "b"} {
		p := &a
		if i == 1 {
			p = &b
		}
		(*p).kill(t)
		// Locks change while it is down: a crashed holder's lock expires.
		redistest.Sleep(ctx, 1500*time.Millisecond)
		restartAt := time.Now()
		*p = startServeOn(t, bin, srv.URL(), (*p).listen, nil, flags...)
		// Each key's history is rebuilt from the stream replayed from 30 s
		// before the last checkpoint; the expirations before it, and their
		// count, come from the checkpoint.
		agree("replica "+name+" restarted after SIGKILL", 5*time.Second, restartAt.Add(-25*time.Second), false)
	}

	after, _ := passiveViewOf(ctx, a, keys, time.Time{}, false)
	for _, k := range []string{"pl:redsync", plain, pyKey} {
		if got, want := after.Keys[k].Since, before.Keys[k].Since; !got.Equal(want) || got.IsZero() {
			t.Errorf("%s since %v after both restarts, want the %v shown before them", k, got, want)
		}
	}
	if n := len(after.Keys["pl:crashed"].Expirations); n < 2 {
		t.Errorf("pl:crashed has %d expirations, want those of the crashed holders while replicas were down too", n)
	}
	// And both show what Redis holds.
	stopRenewing()
	wg.Wait()
	for _, k := range keys {
		rdb.Del(ctx, k)
	}
	agreeEmpty := func() bool {
		va, errA := passiveViewOf(ctx, a, keys, time.Now(), false)
		vb, errB := passiveViewOf(ctx, b, keys, time.Now(), false)
		return errA == nil && errB == nil && cmp.Equal(va, vb) && va.Held == 0 &&
			!slices.ContainsFunc(keys, func(k string) bool { return va.Keys[k].Held })
	}
	if !redistest.Poll(ctx, agreeEmpty) {
		t.Errorf("after every lock was deleted the replicas do not agree on nothing held")
	}
}

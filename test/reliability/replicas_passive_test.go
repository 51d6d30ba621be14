package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/internal/redistest"
	"github.com/lockscope/lockscope/lock"
)

// passiveView is what replicas must agree on about watched locks: each
// key's holder, since and stuck flag with its recent expirations, and the
// overview's held, stuck and expiration counts.
type passiveView struct {
	Held          int
	Stuck         int
	Expirations5m int64
	Keys          map[string]passiveKey
}

type passiveKey struct {
	Held        bool
	Owner       string
	Since       time.Time
	Stuck       bool
	Expirations []time.Time // its recent expired events
}

func passiveViewOf(ctx context.Context, p *proc, keys []string) (passiveView, error) {
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
			if e.Type == "expired" {
				pk.Expirations = append(pk.Expirations, e.At)
			}
		}
		v.Keys[k] = pk
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

// TestReplicasAgreeOnPassiveLocksAcrossSIGKILLs runs two serve replicas with
// the same --watch flags while other libraries' locks are held and renewed:
// a redsync mutex extended every second (SET NX PX, then its extend script's
// PEXPIRE) and a plain SET NX PX kept alive by PEXPIRE, both older than
// --backfill, plus short locks that come and go and one that expires. Each
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
	keys := []string{"pl:redsync", plain, "pl:short", "pl:crashed"}

	// agree waits until both replicas show the same, with the long locks
	// held by their holders, and returns how long that took.
	agree := func(what string, within time.Duration) {
		t.Helper()
		start := time.Now()
		var va, vb passiveView
		var errA, errB error
		for time.Since(start) < within+10*time.Second {
			va, errA = passiveViewOf(ctx, a, keys)
			vb, errB = passiveViewOf(ctx, b, keys)
			if errA == nil && errB == nil && cmp.Equal(va, vb) &&
				va.Keys["pl:redsync"].Owner == "redsync "+lock.Fingerprint(mutex.Value())[:8] &&
				va.Keys[plain].Owner == lock.ForeignOwner(plainToken) {
				took := time.Since(start)
				t.Logf("%s: both replicas agree after %v: held %d, stuck %d, expirations %d", what, took.Round(time.Millisecond), va.Held, va.Stuck, va.Expirations5m)
				if took > within {
					t.Errorf("%s: the replicas agreed after %v, want within %v", what, took.Round(time.Millisecond), within)
				}
				return
			}
			redistest.Sleep(ctx, 100*time.Millisecond)
		}
		t.Fatalf("%s: after %v the replicas disagree (-a +b):\n%s\nerrors: %v, %v\na's log:\n%s\nb's log:\n%s", what, within+10*time.Second,
			cmp.Diff(va, vb), errA, errB, tail(a.out.String(), 2000), tail(b.out.String(), 2000))
	}

	// Past --backfill, --stuck-after and the 30 s after which a hold is
	// kept in the checkpoint: the long holds are older than what a
	// restarted replica replays, and stuck.
	redistest.Sleep(ctx, 32*time.Second)
	agree("both running", 2*time.Second)
	before, _ := passiveViewOf(ctx, a, keys)
	if k := before.Keys["pl:redsync"]; !k.Held || !k.Stuck {
		t.Errorf("pl:redsync = %+v, want held and stuck", k)
	}

	for i, name := range []string{"a", "b"} {
		p := &a
		if i == 1 {
			p = &b
		}
		(*p).kill(t)
		// Locks change while it is down: a crashed holder's lock expires.
		redistest.Sleep(ctx, 1500*time.Millisecond)
		*p = startServeOn(t, bin, srv.URL(), (*p).listen, nil, flags...)
		agree("replica "+name+" restarted after SIGKILL", 5*time.Second)
	}

	after, _ := passiveViewOf(ctx, a, keys)
	for _, k := range []string{"pl:redsync", plain} {
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
		va, errA := passiveViewOf(ctx, a, keys)
		vb, errB := passiveViewOf(ctx, b, keys)
		return errA == nil && errB == nil && cmp.Equal(va, vb) && va.Held == 0 &&
			!slices.ContainsFunc(keys, func(k string) bool { return va.Keys[k].Held })
	}
	if !redistest.Poll(ctx, agreeEmpty) {
		t.Errorf("after every lock was deleted the replicas do not agree on nothing held")
	}
}

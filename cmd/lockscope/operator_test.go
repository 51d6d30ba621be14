package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// hold takes key for owner in the test's Redis and returns the lease and the
// holder as Inspect sees it.
func hold(t *testing.T, lc *lock.Client, key, owner string, ttl time.Duration) (*lock.Lease, *lock.Holder) {
	t.Helper()
	ctx := context.Background()
	l, err := lc.Obtain(ctx, key, ttl, &lock.ObtainOptions{Owner: owner, Fencing: true})
	if err != nil {
		t.Fatalf("Obtain(%q) = %v, want nil", key, err)
	}
	h, err := lc.Inspect(ctx, key)
	if err != nil {
		t.Fatalf("Inspect(%q) = %v, want nil", key, err)
	}
	return l, h
}

type holderJSON struct {
	Key         string  `json:"key"`
	KeyB64      string  `json:"key_b64"`
	Owner       string  `json:"owner"`
	Lease       string  `json:"lease"`
	Fence       int64   `json:"fence"`
	TTLSeconds  float64 `json:"ttl_seconds"`
	Fingerprint string  `json:"fingerprint"`
	Foreign     bool    `json:"foreign"`
}

func TestLocksAndInspect(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	lc := lock.New(rdb, nil)
	ctx := context.Background()
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL()}

	_, invoice := hold(t, lc, "invoice:42", "billing-batch/pod-1", time.Minute)
	odd := "workflow:<b>\"9\"\n\xff"
	_, oddH := hold(t, lc, odd, "editor/alice", time.Minute)
	// Another library's lock (a redsync token: base64 of 16 random bytes),
	// with a TTL, and a plain value without one.
	const token = "MDEyMzQ1Njc4OWFiY2RlZg=="
	rdb.Set(ctx, "job:sync", token, time.Minute)
	rdb.Set(ctx, "config:flag", "on", 0)

	stdout, stderr, code := lockscope(t, env, "", "locks", "--json")
	if code != 0 {
		t.Fatalf("lockscope locks --json: exit %d, stderr %s", code, stderr)
	}
	var got []holderJSON
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("locks --json output is not JSON: %v\n%s", err, stdout)
	}
	for i := range got {
		if got[i].TTLSeconds <= 0 || got[i].TTLSeconds > 60 {
			t.Errorf("%q ttl_seconds = %v, want in (0, 60]", got[i].Key, got[i].TTLSeconds)
		}
		got[i].TTLSeconds = 0
	}
	want := []holderJSON{
		{Key: "invoice:42", Owner: "billing-batch/pod-1", Lease: invoice.Lease, Fence: invoice.Fence, Fingerprint: invoice.Fingerprint},
		{Key: "job:sync", Owner: lock.ForeignOwner(token), Fingerprint: lock.Fingerprint(token), Foreign: true},
		{Key: strings.ToValidUTF8(odd, "\uFFFD"), KeyB64: base64.StdEncoding.EncodeToString([]byte(odd)), Owner: "editor/alice",
			Lease: oddH.Lease, Fence: oddH.Fence, Fingerprint: oddH.Fingerprint},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("locks --json (-want +got):\n%s", d)
	}

	// The table, filtered by pattern: keys quoted when they need it.
	stdout, _, code = lockscope(t, env, "", "locks", "invoice:*")
	if code != 0 || !strings.Contains(stdout, "invoice:42") || !strings.Contains(stdout, "billing-batch/pod-1") ||
		!strings.Contains(stdout, invoice.Fingerprint[:12]) || strings.Contains(stdout, "alice") {
		t.Errorf("lockscope locks invoice:*: exit %d, want only invoice:42 with its holder:\n%s", code, stdout)
	}
	stdout, _, _ = lockscope(t, env, "", "locks", "workflow:*")
	if !strings.Contains(stdout, `"workflow:<b>\"9\"\n\xff"`) {
		t.Errorf("lockscope locks workflow:* does not show the key quoted:\n%s", stdout)
	}

	stdout, _, code = lockscope(t, env, "", "inspect", "invoice:42")
	for _, want := range []string{"billing-batch/pod-1", invoice.Lease, invoice.Fingerprint} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("lockscope inspect invoice:42: exit %d, output lacks %q:\n%s", code, want, stdout)
		}
	}
	stdout, _, code = lockscope(t, env, "", "inspect", "--json", "--", odd)
	var one holderJSON
	if err := json.Unmarshal([]byte(stdout), &one); code != 0 || err != nil || one.Fingerprint != oddH.Fingerprint || one.Owner != "editor/alice" {
		t.Errorf("lockscope inspect --json %q: exit %d, err %v, got %+v, want fingerprint %s", odd, code, err, one, oddH.Fingerprint)
	}
	_, stderr, code = lockscope(t, env, "", "inspect", "invoice:404")
	if code != 1 {
		t.Errorf("inspect of a free key: exit %d, want 1", code)
	}
	oneLine(t, stderr, "lockscope inspect: ", "invoice:404 is not held")
}

func TestReleaseWhatYouSaw(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	lc := lock.New(rdb, nil)
	ctx := context.Background()
	const stream = "ops:events"
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_STREAM=" + stream, "LOCKSCOPE_OPERATOR_USER=oncall-ana"}
	const key = "export:tenant-7"

	// A stale fingerprint: the holder the operator saw has gone and another
	// took the lock. Nothing is released.
	first, seen := hold(t, lc, key, "export-worker/pod-1", time.Minute)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, now := hold(t, lc, key, "export-worker/pod-2", time.Minute)
	_, stderr, code := lockscope(t, env, "", "release", key, "--reason", "stuck", "--fingerprint", seen.Fingerprint, "--yes")
	if code != 3 {
		t.Errorf("release with a stale fingerprint: exit %d, want 3", code)
	}
	oneLine(t, stderr, "lockscope release: ", "owner changed: "+key+" is now held by export-worker/pod-2")
	if h, err := lc.Inspect(ctx, key); err != nil || h.Fingerprint != now.Fingerprint {
		t.Fatalf("after a refused release Inspect(%q) = %+v, %v; want the untouched holder %s", key, h, err, now.Fingerprint)
	}

	// Declined at the prompt: nothing released.
	stdout, _, code := lockscope(t, env, "no\n", "release", key, "--reason", "stuck")
	if code != 1 || !strings.Contains(stdout, now.Fingerprint) || !strings.Contains(stdout, "Type 'yes' to confirm") {
		t.Errorf("declined release: exit %d, want 1 after showing the holder and the prompt:\n%s", code, stdout)
	}
	if h, err := lc.Inspect(ctx, key); err != nil || h.Fingerprint != now.Fingerprint {
		t.Fatalf("after a declined release Inspect(%q) = %+v, %v; want it untouched", key, h, err)
	}

	// The owner changes while the prompt waits: the confirmation releases
	// nothing.
	p := start(t, env, "release", key, "--reason", "stuck export")
	redistest.WaitFor(t, 10*time.Second, "the confirmation prompt", func() error {
		if !strings.Contains(p.stdout.String(), "Type 'yes' to confirm") {
			return errors.New("no prompt yet")
		}
		return nil
	})
	if _, err := lc.ForceRelease(ctx, key, now.Fingerprint, "test", "race"); err != nil {
		t.Fatal(err)
	}
	_, third := hold(t, lc, key, "export-worker/pod-3", time.Minute)
	p.stdin.Write([]byte("yes\n"))
	if code := p.wait(20 * time.Second); code != 3 {
		t.Errorf("release confirmed after the owner changed: exit %d, want 3", code)
	}
	oneLine(t, p.stderr.String(), "lockscope release: ", "owner changed")
	if h, err := lc.Inspect(ctx, key); err != nil || h.Fingerprint != third.Fingerprint {
		t.Fatalf("after the raced release Inspect(%q) = %+v, %v; want pod-3 untouched", key, h, err)
	}

	// Confirmed and still the same holder: released, and recorded.
	stdout, stderr, code = lockscope(t, env, "yes\n", "release", key, "--reason", "stuck export")
	if code != 0 || !strings.Contains(stdout, "released "+key) {
		t.Fatalf("confirmed release: exit %d, stdout %s stderr %s", code, stdout, stderr)
	}
	if _, err := lc.Inspect(ctx, key); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("after the release Inspect(%q) = %v, want ErrNotHeld", key, err)
	}
	evs := redistest.ReadStream(t, rdb, stream).Events
	if len(evs) != 1 {
		t.Fatalf("stream %s has %d events, want the one forced release: %+v", stream, len(evs), evs)
	}
	e := evs[0]
	if e.Type != event.Forced || e.Key != key || e.Owner != "export-worker/pod-3" || e.By != "oncall-ana" || e.Reason != "stuck export" || e.Lease != third.Lease {
		t.Errorf("forced event = %+v, want forced %s of export-worker/pod-3 lease %s by oncall-ana, reason %q", e, key, third.Lease, "stuck export")
	}

	_, stderr, code = lockscope(t, env, "", "release", key, "--reason", "again", "--yes")
	if code != 1 {
		t.Errorf("release of a free key: exit %d, want 1", code)
	}
	oneLine(t, stderr, "lockscope release: ", "is not held; nothing to release")
}

// locks shows the callers waiting for each lock now, from the stream's
// newest waiting events not yet ended.
func TestLocksShowsWaiters(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL()}
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{FlushInterval: 10 * time.Millisecond})
	defer em.Close(ctx)
	lc := lock.New(rdb, &lock.Options{Owner: "holder", Recorder: em})
	l, _ := hold(t, lc, "inventory:sku-1", "holder", time.Minute)
	hold(t, lc, "inventory:sku-2", "holder", time.Minute)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	for _, who := range []string{"w1", "w2"} {
		go func() {
			defer func() { done <- struct{}{} }()
			c := lock.New(rdb, &lock.Options{Owner: who, Recorder: em})
			if l, err := c.Obtain(wctx, "inventory:sku-1", time.Minute, &lock.ObtainOptions{Retry: lock.LinearBackoff(10 * time.Millisecond)}); err == nil {
				l.Release(ctx)
			}
		}()
	}
	defer func() { cancel(); <-done; <-done }()
	counts := func() map[string]int {
		stdout, stderr, code := lockscope(t, env, "", "locks", "--json", "inventory:*")
		if code != 0 {
			t.Fatalf("locks --json: exit %d, %s", code, stderr)
		}
		var got []struct {
			Key     string `json:"key"`
			Waiters *int   `json:"waiters"`
		}
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, g := range got {
			if g.Waiters == nil {
				t.Fatalf("locks --json: no waiters for %s:\n%s", g.Key, stdout)
			}
			out[g.Key] = *g.Waiters
		}
		return out
	}
	redistest.WaitFor(t, 30*time.Second, "two waiters on sku-1", func() error {
		if got := counts(); got["inventory:sku-1"] != 2 || got["inventory:sku-2"] != 0 {
			return fmt.Errorf("locks waiters = %v, want sku-1: 2, sku-2: 0", got)
		}
		return nil
	})
	stdout, _, _ := lockscope(t, env, "", "locks", "inventory:sku-1")
	if !strings.Contains(stdout, "WAITING") || !strings.Contains(stdout, "  2  ") {
		t.Errorf("locks table lacks the WAITING column with 2:\n%s", stdout)
	}
	// The holder releases: both waits end, one acquires, the other then
	// waits on it or gets it next; soon nobody waits.
	l.Release(ctx)
	redistest.WaitFor(t, 30*time.Second, "no waiter after the release", func() error {
		if got := counts(); got["inventory:sku-1"] != 0 {
			return fmt.Errorf("locks waiters after the release = %v, want none", got)
		}
		return nil
	})
}

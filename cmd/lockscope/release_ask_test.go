package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// listen makes l's hold listen and waits until Redis has its subscription.
func listen(t *testing.T, lc *lock.Client, l *lock.Lease, h *lock.Holder) <-chan lock.ReleaseRequest {
	t.Helper()
	asks := l.ReleaseRequested()
	redistest.WaitFor(t, 15*time.Second, "the holder's subscription", func() bool {
		n, err := lc.Listeners(context.Background(), h)
		return err == nil && n == 1
	})
	return asks
}

func requestedOf(t *testing.T, s redistest.Stream, key string) []event.Event {
	t.Helper()
	var out []event.Event
	for _, e := range s.Events {
		if e.Type == event.Requested && e.Key == key {
			out = append(out, e)
		}
	}
	return out
}

// release KEY --ask: a Go holder with a 30 s TTL hears the request at once
// and releases; the command sees the key freed and exits 0. A holder that
// ignores it keeps the lock past the grace: exit 4, or with --then-force a
// forced release of the holder shown.
func TestReleaseAsk(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	lc := lock.New(rdb, nil)
	ctx := context.Background()
	const stream = "ops:events"
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_STREAM=" + stream, "LOCKSCOPE_OPERATOR_USER=bob"}
	const ttl = 30 * time.Second

	// The holder releases on request.
	const key = "workflow:42"
	l, h := hold(t, lc, key, "editor/carol", ttl)
	asks := listen(t, lc, l, h)
	heardIn := make(chan time.Duration, 1)
	sent := time.Now()
	go func() {
		r := <-asks
		heardIn <- time.Since(sent)
		if r.Operator == "bob" && r.Reason == "I need to edit it" && r.Grace == ttl {
			l.Release(context.Background())
		}
	}()
	stdout, stderr, code := lockscope(t, env, "", "release", key, "--ask", "--grace", "30s", "--reason", "I need to edit it")
	if code != 0 || !strings.Contains(stdout, "asked editor/carol to release "+key+" (heard by 1 listener), by bob: I need to edit it; waiting up to 30s") ||
		!strings.Contains(stdout, "released by its holder after ") {
		t.Fatalf("release --ask of a holder that releases: exit %d, want 0, asked and released:\n%s\n%s", code, stdout, stderr)
	}
	if took := <-heardIn; took >= ttl {
		t.Errorf("the holder heard the request %v after the command started, want within its %v TTL", took, ttl)
	}
	reqs := requestedOf(t, redistest.ReadStream(t, rdb, stream), key)
	if len(reqs) != 1 || reqs[0].By != "bob" || reqs[0].Reason != "I need to edit it" || reqs[0].Wait != ttl || reqs[0].Count != 1 || reqs[0].Lease != h.Lease || reqs[0].Owner != "editor/carol" {
		t.Errorf("requested events = %+v, want one: bob's, its reason, grace 30s, heard by 1, of carol's lease", reqs)
	}

	// The holder ignores the request: after the grace, exit 4, lock kept.
	const stubborn = "report:q3"
	l2, h2 := hold(t, lc, stubborn, "reporter/busy", ttl)
	asks2 := listen(t, lc, l2, h2)
	stdout, stderr, code = lockscope(t, env, "", "release", stubborn, "--ask", "--grace", "1s", "--reason", "please")
	if code != 4 {
		t.Errorf("release --ask of a holder that ignores it: exit %d, want 4:\n%s", code, stdout)
	}
	oneLine(t, stderr, "lockscope release: ", "no answer in 1s: reporter/busy still holds "+stubborn+"; add --then-force")
	if got, err := lc.Inspect(ctx, stubborn); err != nil || got.Fingerprint != h2.Fingerprint {
		t.Fatalf("after an ignored request Inspect(%q) = %+v, %v; want it still held", stubborn, got, err)
	}
	<-asks2 // it heard, and ignored it

	// --then-force: the same, then a forced release of the holder shown.
	stdout, stderr, code = lockscope(t, env, "", "release", stubborn, "--ask", "--grace", "1s", "--then-force", "--yes", "--reason", "blocking the deploy")
	if code != 0 || !strings.Contains(stdout, "no answer in 1s") || !strings.Contains(stdout, "force-releasing the holder shown above (--then-force)") ||
		!strings.Contains(stdout, "released "+stubborn+" (held by reporter/busy") {
		t.Fatalf("release --ask --then-force: exit %d, want 0 and a forced release after the grace:\n%s\n%s", code, stdout, stderr)
	}
	if _, err := lc.Inspect(ctx, stubborn); err == nil {
		t.Errorf("after --then-force %s is still held", stubborn)
	}
	s := redistest.ReadStream(t, rdb, stream)
	var forcedAfterAsk bool
	for i, e := range s.Events {
		if e.Type == event.Forced && e.Key == stubborn && e.Lease == h2.Lease && e.By == "bob" {
			for _, p := range s.Events[:i] {
				forcedAfterAsk = forcedAfterAsk || p.Type == event.Requested && p.Key == stubborn && p.Reason == "blocking the deploy"
			}
		}
	}
	if !forcedAfterAsk {
		t.Errorf("the stream lacks the request followed by the forced release of %s's holder: %+v", stubborn, s.Events)
	}

	// Usage errors.
	for _, args := range [][]string{
		{"release", key, "--then-force", "--reason", "r"},
		{"release", "--owner", "x", "--ask", "--reason", "r"},
		{"release", key, "--ask", "--grace", "0s", "--reason", "r"},
	} {
		if _, _, code := lockscope(t, env, "", args...); code != 2 {
			t.Errorf("lockscope %q: exit %d, want 2", args, code)
		}
	}
}

// release KEY --ask of holders that cannot hear says so at once instead
// of waiting (exit 4), or forces at once with --then-force; a key that
// changed hands since the operator looked is refused (exit 3) and its new
// holder is not asked.
func TestReleaseAskCannotHearOrChanged(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	lc := lock.New(rdb, nil)
	ctx := context.Background()
	const stream = "ops:events"
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_STREAM=" + stream, "LOCKSCOPE_OPERATOR_USER=bob"}

	// A lockscope holder that does not listen (an older library): exit 4
	// at once, though the grace is an hour.
	hold(t, lc, "old:1", "old-app/pod-1", time.Minute)
	stdout, stderr, code := lockscope(t, env, "", "release", "old:1", "--ask", "--grace", "1h", "--reason", "r")
	if code != 4 || strings.Contains(stdout, "waiting up to") {
		t.Errorf("release --ask of a holder that does not listen: exit %d, want 4 without waiting:\n%s", code, stdout)
	}
	oneLine(t, stderr, "lockscope release: ", "old:1: the holder cannot be asked: it does not listen for release requests")
	if reqs := requestedOf(t, redistest.ReadStream(t, rdb, stream), "old:1"); len(reqs) != 1 || reqs[0].Count != 0 {
		t.Errorf("requested events of old:1 = %+v, want one, heard by nobody (on the record)", reqs)
	}
	stdout, _, code = lockscope(t, env, "", "release", "old:1", "--ask", "--grace", "1h", "--then-force", "--yes", "--reason", "r")
	if code != 0 || !strings.Contains(stdout, "the holder cannot be asked") || !strings.Contains(stdout, "released old:1") {
		t.Errorf("release --ask --then-force of a holder that does not listen: exit %d, want 0, forced at once:\n%s", code, stdout)
	}

	// Another library's lock: nothing sent.
	if err := rdb.Set(ctx, "redsync:1", "k3yb9Xq2Lm0Zp7Rt5Vw1Yg==", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = lockscope(t, env, "", "release", "redsync:1", "--ask", "--reason", "r")
	if code != 4 {
		t.Errorf("release --ask of a redsync lock: exit %d, want 4", code)
	}
	oneLine(t, stderr, "lockscope release: ", "the holder cannot be asked: redsync ")
	if !strings.Contains(stderr, "another library's lock, which cannot hear a release request; nothing was sent") {
		t.Errorf("stderr = %q, want it to say another library's lock cannot hear", stderr)
	}

	// The key changed hands: refused, and the new holder hears nothing.
	first, seen := hold(t, lc, "doc:7", "editor/old", time.Minute)
	listen(t, lc, first, seen)
	first.Release(ctx)
	second, now := hold(t, lc, "doc:7", "editor/new", time.Minute)
	asks := listen(t, lc, second, now)
	_, stderr, code = lockscope(t, env, "", "release", "doc:7", "--ask", "--fingerprint", seen.Fingerprint, "--reason", "stale")
	if code != 3 {
		t.Errorf("release --ask with the previous holder's fingerprint: exit %d, want 3", code)
	}
	oneLine(t, stderr, "lockscope release: ", "owner changed: doc:7 is now held by editor/new")
	if _, n, err := lc.RequestRelease(ctx, "doc:7", now.Fingerprint, lock.ReleaseRequest{Operator: "marker"}); err != nil || n != 1 {
		t.Fatalf("marker request = %d, %v", n, err)
	}
	select {
	case r := <-asks:
		if r.Operator != "marker" {
			t.Errorf("the new holder first heard %+v, want only the marker", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the new holder heard nothing, not even the marker")
	}
}

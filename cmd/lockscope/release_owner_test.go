package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// release --owner: a pod died holding several locks. Each is released only
// if its value is still the one listed; a key whose holder changed while
// the prompt waited is left to its new holder, one its holder released is
// reported free, and the locks of other owners (one whose name the dead
// owner's is a prefix of, too) are untouched.
func TestReleaseByOwner(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	lc := lock.New(rdb, nil) // records nothing: the stream holds only what the command writes
	ctx := context.Background()
	const stream = "ops:events"
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_STREAM=" + stream, "LOCKSCOPE_OPERATOR_USER=oncall-ana"}
	const dead = "billing/pod-7"
	odd := "tenant:\"9\"\n\x1b[31m"
	leases := map[string]*lock.Lease{}
	for _, k := range []string{"invoice:1", "invoice:2", "invoice:3", "report:q3", odd} {
		leases[k], _ = hold(t, lc, k, dead, time.Minute)
	}
	_, other := hold(t, lc, "invoice:4", "billing/pod-8", time.Minute)
	_, longer := hold(t, lc, "invoice:5", dead+"0", time.Minute)
	untouched := func() {
		t.Helper()
		for _, h := range []*lock.Holder{other, longer} {
			if got, err := lc.Inspect(ctx, h.Key); err != nil || got.Fingerprint != h.Fingerprint {
				t.Errorf("Inspect(%q) = %+v, %v; want %s's lock untouched", h.Key, got, err, h.Owner)
			}
		}
	}
	quoted := `"tenant:\"9\"\n\x1b[31m"`

	// Usage: --fingerprint names one holder, not an owner's.
	_, stderr, code := lockscope(t, env, "", "release", "--owner", dead, "--fingerprint", other.Fingerprint, "--reason", "r")
	if code != 2 {
		t.Errorf("release --owner --fingerprint: exit %d, want 2", code)
	}
	oneLine(t, stderr, "lockscope release: ", "--fingerprint names one holder: it does not go with --owner")

	// A pattern narrows the scan (an operator user limited to a prefix).
	stdout, _, code := lockscope(t, env, "", "release", "--owner", dead, "invoice:*", "--reason", "pod died")
	if code != 1 || !strings.Contains(stdout, dead+" holds 3 locks matching invoice:*:") || strings.Contains(stdout, "report:q3") {
		t.Errorf("release --owner with a pattern: exit %d, want 1 (not confirmed) after listing the 3 invoice locks:\n%s", code, stdout)
	}

	// No --yes and nothing on stdin (a script, a CI job): the locks are
	// listed, nothing is released.
	stdout, stderr, code = lockscope(t, env, "", "release", "--owner", dead, "--reason", "pod died")
	if code != 1 {
		t.Errorf("release --owner without --yes, stdin empty: exit %d, want 1", code)
	}
	oneLine(t, stderr, "lockscope release: ", "not confirmed: no answer on stdin (use --yes to skip the confirmation)")
	for _, want := range []string{dead + " holds 5 locks:", "invoice:1", "invoice:3", "report:q3", quoted} {
		if !strings.Contains(stdout, want) {
			t.Errorf("release --owner listing lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "invoice:4") || strings.Contains(stdout, "invoice:5") || strings.Contains(stdout, "\x1b") {
		t.Errorf("release --owner lists another owner's lock or a raw escape byte:\n%q", stdout)
	}
	for k := range leases {
		if _, err := lc.Inspect(ctx, k); err != nil {
			t.Fatalf("after a refused release Inspect(%q) = %v, want it still held", k, err)
		}
	}

	// Confirmed at the prompt, after two keys moved on while it waited:
	// the odd key changed hands, report:q3 was released by its holder.
	p := start(t, env, "release", "--owner", dead, "--reason", "pod-7 OOM-killed, INC-7")
	redistest.WaitFor(t, 20*time.Second, "the confirmation prompt", func() error {
		if !strings.Contains(p.stdout.String(), "Type 'yes' to confirm") {
			return errors.New("no prompt yet")
		}
		return nil
	})
	if !strings.Contains(p.stdout.String(), "Force-release these 5 locks of "+dead+"?") {
		t.Errorf("prompt does not name the count and the owner:\n%s", p.stdout)
	}
	seen, _ := lc.Inspect(ctx, odd)
	if _, err := lc.ForceRelease(ctx, odd, seen.Fingerprint, "test", "race"); err != nil {
		t.Fatal(err)
	}
	_, successor := hold(t, lc, odd, "billing/pod-9", time.Minute)
	if err := leases["report:q3"].Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.stdin.Write([]byte("yes\n"))
	if code := p.wait(30 * time.Second); code != 3 {
		t.Errorf("release --owner with a changed holder: exit %d, want 3", code)
	}
	oneLine(t, p.stderr.String(), "lockscope release: ", "owner changed: 1 of 5 locks")
	out := p.stdout.String()
	_, results, _ := strings.Cut(out, "Type 'yes' to confirm: ")
	wantLines := []string{
		"released: invoice:1",
		"released: invoice:2",
		"released: invoice:3",
		"skipped: report:q3: already free",
		"skipped: " + quoted + ": holder changed (now billing/pod-9)",
		"3 released, 1 skipped (holder changed), 1 skipped (already free); recorded as forced by oncall-ana: pod-7 OOM-killed, INC-7",
	}
	if got := strings.Split(strings.TrimSpace(results), "\n"); !slices.Equal(got, wantLines) {
		t.Errorf("release --owner result lines =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
	}
	for _, k := range []string{"invoice:1", "invoice:2", "invoice:3", "report:q3"} {
		if h, err := lc.Inspect(ctx, k); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("after release --owner Inspect(%q) = %+v, %v; want ErrNotHeld", k, h, err)
		}
	}
	if h, err := lc.Inspect(ctx, odd); err != nil || h.Fingerprint != successor.Fingerprint {
		t.Errorf("after release --owner Inspect(%q) = %+v, %v; want the successor pod-9 untouched", odd, h, err)
	}
	untouched()

	// Each release is a forced event: who, why, whose lease.
	evs := redistest.ReadStream(t, rdb, stream).Events
	var forced []string
	for _, e := range evs {
		if l := leases[e.Key]; l == nil || e.Type != event.Forced || e.Owner != dead || e.By != "oncall-ana" || e.Reason != "pod-7 OOM-killed, INC-7" || e.Lease != l.ID() {
			t.Errorf("event %+v, want forced of one of %s's keys by oncall-ana with the reason and its lease", e, dead)
		}
		forced = append(forced, e.Key)
	}
	slices.Sort(forced)
	if want := []string{"invoice:1", "invoice:2", "invoice:3"}; !slices.Equal(forced, want) {
		t.Errorf("forced events for %q, want %q", forced, want)
	}

	// Nothing of the owner left: a clear error, nothing touched.
	_, stderr, code = lockscope(t, env, "", "release", "--owner", dead, "--reason", "again", "--yes")
	if code != 1 {
		t.Errorf("release --owner of an owner holding nothing: exit %d, want 1", code)
	}
	oneLine(t, stderr, "lockscope release: ", dead+" holds no locks; nothing to release")
	untouched()

	// --yes: no prompt, every lock of the owner released, exit 0.
	stdout, stderr, code = lockscope(t, env, "", "release", "--owner", "billing/pod-8", "--reason", "drained", "--yes")
	if code != 0 || strings.Contains(stdout, "Type 'yes'") || !strings.Contains(stdout, "released: invoice:4\n1 released, 0 skipped (holder changed), 0 skipped (already free)") {
		t.Errorf("release --owner --yes: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	if _, err := lc.Inspect(ctx, "invoice:4"); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("after release --owner --yes Inspect(invoice:4) = %v, want ErrNotHeld", err)
	}
	if h, err := lc.Inspect(ctx, "invoice:5"); err != nil || h.Fingerprint != longer.Fingerprint {
		t.Errorf("Inspect(invoice:5) = %+v, %v; want %s's lock untouched", h, err, longer.Owner)
	}
}

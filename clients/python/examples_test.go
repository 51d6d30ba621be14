package python

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestExamplesOnTheDashboard runs each example of examples/ against a real
// Redis read by the real lockscope serve, and checks that the dashboard's
// JSON API (and the key page) shows what the example did.
func TestExamplesOnTheDashboard(t *testing.T) {
	checkPython(t)
	srv := redistest.Start(t, redistest.Options{})
	sv := startServe(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(t *testing.T, name string, args ...string) *pyProc {
		return startPython(ctx, t, append([]string{"examples/" + name + ".py", "--redis", srv.URL()}, args...)...)
	}
	// settled waits until the key's events are all applied: the example
	// flushed them before it exited, and serve reads within milliseconds.
	settled := func(t *testing.T, key string, cond func(lockDetail) bool) lockDetail {
		var d lockDetail
		redistest.WaitFor(t, 10*time.Second, key+" on the dashboard", func() bool {
			d = sv.Lock(key)
			return cond(d)
		})
		return d
	}
	without := func(steps []string, prefix string) []string {
		return slices.DeleteFunc(slices.Clone(steps), func(s string) bool { return strings.HasPrefix(s, prefix) })
	}

	t.Run("workflow_editor", func(t *testing.T) {
		const key = "lock:workflow:42"
		p := run(t, "workflow_editor", "--edit-seconds", "3")
		if l := p.expect(t, "bob: workflow 42 is being edited by", 30*time.Second); !strings.HasSuffix(l, " editor/alice") {
			t.Errorf("bob was told %q, want editor/alice", l)
		}
		p.expect(t, "bob: waiting", 10*time.Second)
		// While bob waits: Waiting now.
		d := settled(t, key, func(d lockDetail) bool { return len(d.WaitersNow) == 1 })
		if w := d.WaitersNow[0]; w.Owner != "editor/bob" || w.Holder != "editor/alice" || d.Owner != "editor/alice" ||
			d.Redis == nil || d.Redis.Owner != "editor/alice" || d.Redis.Foreign {
			t.Errorf("while bob waits: waiter %+v, holder %q, in Redis %+v; want editor/bob waiting on editor/alice", w, d.Owner, d.Redis)
		}
		if page := sv.Get("/keys/"+key, nil); !strings.Contains(page, `data-testid="waiter-row"`) || !strings.Contains(page, "editor/bob") {
			t.Error("the key page shows no waiter row for editor/bob")
		}
		if n := sv.Metric("lockscope_waiters", map[string]string{"class": d.Class}); n != 1 {
			t.Errorf("lockscope_waiters{class=%q} = %v, want 1", d.Class, n)
		}
		p.wait(t, 30*time.Second)
		d = settled(t, key, func(d lockDetail) bool { return d.Acquisitions == 2 && !d.Held })
		steps := d.RecentSteps()
		want := []string{
			"acquired editor/alice",
			"failed editor/bob:held <- editor/alice",
			"waiting editor/bob <- editor/alice",
			"released editor/alice",
			"acquired editor/bob",
			"released editor/bob",
		}
		if diff := cmp.Diff(want, without(steps, "renewed ")); diff != "" {
			t.Errorf("%s's events (-want +got):\n%s", key, diff)
		}
		if !slices.Contains(steps, "renewed editor/alice") {
			t.Errorf("%s's events %q: alice's refreshes are missing", key, steps)
		}
		if len(d.WaitersNow) != 0 || d.Failures != 1 {
			t.Errorf("after the example: %d waiters, %d failures; want 0 and 1", len(d.WaitersNow), d.Failures)
		}
	})

	t.Run("cron_once", func(t *testing.T) {
		const key = "cron:nightly-report"
		p := run(t, "cron_once", "--replicas", "3", "--job-seconds", "0.5")
		p.wait(t, 30*time.Second)
		d := settled(t, key, func(d lockDetail) bool { return d.Acquisitions == 1 && d.Failures == 2 && !d.Held })
		steps := d.RecentSteps()
		var winner string
		for _, s := range steps {
			if w, ok := strings.CutPrefix(s, "acquired "); ok {
				winner = w
			}
		}
		var want []string
		for _, n := range []string{"1", "2", "3"} {
			if o := "cron/replica-" + n; o != winner {
				want = append(want, "failed "+o+":held <- "+winner)
			}
		}
		want = append(want, "acquired "+winner, "released "+winner)
		slices.Sort(want)
		slices.Sort(steps)
		if diff := cmp.Diff(want, steps); diff != "" || winner == "" {
			t.Errorf("%s's events, sorted (-want +got):\n%s", key, diff)
		}
		if n := sv.Metric("lockscope_acquire_failures_total", map[string]string{"class": d.Class, "reason": "held"}); n != 2 {
			t.Errorf("lockscope_acquire_failures_total{class=%q,reason=held} = %v, want 2", d.Class, n)
		}
	})

	t.Run("payment_guard", func(t *testing.T) {
		const key = "payment:order:1001"
		p := run(t, "payment_guard", "--charge-seconds", "0.5")
		refused := p.expect(t, "req-", 30*time.Second) // "req-2: refused: order 1001 is being paid by payments/req-1"
		p.wait(t, 30*time.Second)
		d := settled(t, key, func(d lockDetail) bool { return d.Acquisitions == 1 && d.Failures == 1 && !d.Held })
		steps := d.RecentSteps()
		if len(steps) != 3 {
			t.Fatalf("%s's events = %q, want acquired, failed, released", key, steps)
		}
		// The two requests are threads of one emitter: the refused one can
		// record its failure before the payer's thread records the
		// acquisition, so the stream's order of the first two is either.
		var payer string
		for _, s := range steps {
			if p, ok := strings.CutPrefix(s, "acquired "); ok {
				payer = p
			}
		}
		loser := "payments/req-1"
		if payer == loser {
			loser = "payments/req-2"
		}
		want := []string{"acquired " + payer, "failed " + loser + ":held <- " + payer, "released " + payer}
		got := slices.Clone(steps)
		slices.Sort(want)
		slices.Sort(got)
		if diff := cmp.Diff(want, got); diff != "" || steps[2] != "released "+payer {
			t.Errorf("%s's events %q, want the acquisition and the refusal in either order, then the release (sorted, -want +got):\n%s", key, steps, diff)
		}
		if !strings.HasSuffix(refused, "being paid by "+payer) || !strings.HasPrefix("payments/"+refused, loser) {
			t.Errorf("the refused request printed %q; want %s told that %s pays", refused, loser, payer)
		}
	})

	t.Run("cluster_lock", func(t *testing.T) {
		const key = "cluster:agent-scheduler"
		p := run(t, "cluster_lock", "--work-seconds", "3")
		if l := p.expect(t, "node-b: the scheduler is owned by", 30*time.Second); !strings.HasSuffix(l, " node-a") {
			t.Errorf("node-b was told %q, want node-a", l)
		}
		d := settled(t, key, func(d lockDetail) bool { return d.Held && d.Owner == "node-a" && d.Failures >= 1 })
		if d.Redis == nil || d.Redis.Owner != "node-a" || d.Redis.Lease != d.Lease {
			t.Errorf("while node-a works: Redis holder %+v, want node-a with lease %s", d.Redis, d.Lease)
		}
		p.wait(t, 30*time.Second)
		d = settled(t, key, func(d lockDetail) bool { return d.Acquisitions == 2 && !d.Held })
		steps := d.RecentSteps()
		compact := slices.Compact(without(steps, "renewed "))
		want := []string{"acquired node-a", "failed node-b:held <- node-a", "released node-a", "acquired node-b", "released node-b"}
		if diff := cmp.Diff(want, compact); diff != "" {
			t.Errorf("%s's events, repeats folded (-want +got):\n%s", key, diff)
		}
		if renewals := len(steps) - len(without(steps, "renewed node-a")); renewals < 1 {
			t.Errorf("no renewal by node-a in 3 s (one every 2 s); events %q", steps)
		}
	})
}

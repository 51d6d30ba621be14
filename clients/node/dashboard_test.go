package node

import (
	"context"
	"math"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// onDashboard starts a redis-server and lockscope serve reading it, and
// returns them with party, which runs test/drivers/party.js against that
// server until the test ends.
func onDashboard(t *testing.T) (*redistest.Server, *serve, func(args ...string) *nodeProc) {
	t.Helper()
	checkNode(t)
	srv := redistest.Start(t, redistest.Options{})
	sv := startServe(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	party := func(args ...string) *nodeProc {
		return startNode(ctx, t, append([]string{"test/drivers/party.js", args[0], "--redis", srv.URL()}, args[1:]...)...)
	}
	return srv, sv, party
}

// settled polls key's detail until cond holds.
func settled(t *testing.T, sv *serve, key string, cond func(lockDetail) bool) lockDetail {
	t.Helper()
	var d lockDetail
	redistest.WaitFor(t, 15*time.Second, key+" on the dashboard", func() bool {
		d = sv.Lock(key)
		return cond(d)
	})
	return d
}

func without(steps []string, prefix string) []string {
	return slices.DeleteFunc(slices.Clone(steps), func(s string) bool { return strings.HasPrefix(s, prefix) })
}

// TestHolderAndTwoWaitersOnTheDashboard: a Node service holds a lock while
// two others wait for it. While they wait the dashboard counts both and
// names them, and the holder they wait for (read from its value in Redis
// too); once the holder lets go each gets the lock in turn, and their waits
// are in the class's wait histogram.
func TestHolderAndTwoWaitersOnTheDashboard(t *testing.T) {
	_, sv, party := onDashboard(t)
	const key = "orders:1001"
	holder := party("hold", "--owner", "node/holder", "--key", key)
	lease := strings.Fields(holder.expect(t, "holding ", 30*time.Second))[1]
	waiters := []*nodeProc{
		party("wait", "--owner", "node/waiter-1", "--key", key, "--hold-ms", "200"),
		party("wait", "--owner", "node/waiter-2", "--key", key, "--hold-ms", "200"),
	}

	d := settled(t, sv, key, func(d lockDetail) bool { return len(d.WaitersNow) == 2 })
	type waiter struct{ Owner, Holder string }
	var got []waiter
	for _, w := range d.WaitersNow {
		got = append(got, waiter{w.Owner, w.Holder})
		if len(w.Holds) != 0 {
			t.Errorf("waiter %s holds %q, want none", w.Owner, w.Holds)
		}
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Owner < got[j].Owner })
	if diff := cmp.Diff([]waiter{{"node/waiter-1", "node/holder"}, {"node/waiter-2", "node/holder"}}, got); diff != "" {
		t.Errorf("%s waiters_now (-want +got):\n%s", key, diff)
	}
	if d.Waiters != 2 || d.Owner != "node/holder" || d.Lease != lease || d.Redis == nil || d.Redis.Owner != "node/holder" || d.Redis.Lease != lease || d.Redis.Foreign {
		t.Errorf("while they wait: %d waiters, holder %q (lease %s), in Redis %+v; want 2 waiting on node/holder (lease %s), named by its value", d.Waiters, d.Owner, d.Lease, d.Redis, lease)
	}
	page := sv.Get("/keys/"+key, nil)
	for _, w := range []string{"node/waiter-1", "node/waiter-2"} {
		if !strings.Contains(page, `data-testid="waiter-row"`) || !strings.Contains(page, w) {
			t.Errorf("the key page shows no waiter row for %s", w)
		}
	}
	// The gauge follows the collector's scan (every second).
	redistest.WaitFor(t, 5*time.Second, "lockscope_waiters 2", func() bool {
		return sv.Metric("lockscope_waiters", map[string]string{"class": d.Class}) == 2
	})
	waited := map[string]float64{} // how long the dashboard showed each waiter waiting
	for _, w := range sv.Lock(key).WaitersNow {
		waited[w.Owner] = w.Waiting
	}

	holder.say(t, "release")
	holder.expect(t, "released", 30*time.Second)
	holder.wait(t, 30*time.Second)
	for _, w := range waiters {
		w.wait(t, 30*time.Second)
	}
	d = settled(t, sv, key, func(d lockDetail) bool { return d.Acquisitions == 3 && !d.Held && len(d.WaitersNow) == 0 })
	steps := d.RecentSteps()
	want := []string{
		"acquired node/holder",
		"waiting node/waiter-1 <- node/holder",
		"waiting node/waiter-2 <- node/holder",
		"released node/holder",
		"acquired node/waiter-1", "released node/waiter-1",
		"acquired node/waiter-2", "released node/waiter-2",
	}
	sorted := slices.Sorted(slices.Values(steps))
	slices.Sort(want)
	if diff := cmp.Diff(want, sorted); diff != "" {
		t.Errorf("%s's events, sorted (-want +got):\n%s\nin order: %q", key, diff, steps)
	}
	if i := slices.Index(steps, "released node/holder"); i < 0 || i > slices.Index(steps, "acquired node/waiter-1") || i > slices.Index(steps, "acquired node/waiter-2") {
		t.Errorf("%s's events %q: a waiter acquired before the holder released", key, steps)
	}
	if d.Contentions != 2 || d.Failures != 0 {
		t.Errorf("contentions %d, failures %d; want 2 and 0", d.Contentions, d.Failures)
	}

	// Their waits, in the class's histogram: three acquisitions, whose waits
	// add up to what their acquired events say, the waiters' at least as
	// long as the dashboard showed them waiting.
	var waits []float64
	for _, e := range d.Recent {
		if e.Type != "acquired" {
			continue
		}
		waits = append(waits, e.Wait)
		if e.Wait < waited[e.Owner] {
			t.Errorf("%s's wait %.3fs: want at least the %.3fs the dashboard showed it waiting", e.Owner, e.Wait, waited[e.Owner])
		}
	}
	count, sum := sv.Histogram("lockscope_wait_seconds", map[string]string{"class": d.Class})
	var total float64
	for _, w := range waits {
		total += w
	}
	if count != 3 || math.Abs(sum-total) > 0.01 || d.Wait.Count != 3 {
		t.Errorf("lockscope_wait_seconds{class=%q}: %d waits summing to %.3fs (the key's: %d); want 3 summing to %.3fs, the acquired events' %v", d.Class, count, sum, d.Wait.Count, total, waits)
	}
}

// TestHolderThatDiesOnTheDashboard: a Node service holding a lock is killed
// (no release) while another waits for it. The lock's TTL lapses, the
// dashboard records the expiry as an clienttest.Incident of the dead holder, and the
// waiter, told whom it waited for, gets the lock.
func TestHolderThatDiesOnTheDashboard(t *testing.T) {
	_, sv, party := onDashboard(t)
	const key = "report:7"
	holder := party("hold", "--owner", "node/doomed", "--key", key, "--ttl-ms", "3000")
	holder.expect(t, "holding ", 30*time.Second)
	heir := party("wait", "--owner", "node/heir", "--key", key, "--retry-delay", "50")
	d := settled(t, sv, key, func(d lockDetail) bool { return len(d.WaitersNow) == 1 })
	if w := d.WaitersNow[0]; w.Owner != "node/heir" || w.Holder != "node/doomed" {
		t.Errorf("waiter %+v, want node/heir waiting on node/doomed", w)
	}

	holder.kill(t)
	heir.expect(t, "acquired ", 30*time.Second)
	heir.wait(t, 30*time.Second)
	d = settled(t, sv, key, func(d lockDetail) bool { return d.Acquisitions == 2 && !d.Held })
	steps := d.RecentSteps()
	want := []string{"acquired node/doomed", "waiting node/heir <- node/doomed", "acquired node/heir", "released node/heir"}
	if diff := cmp.Diff(want, without(steps, "expired ")); diff != "" {
		t.Errorf("%s's events but expiries (-want +got):\n%s", key, diff)
	}
	redistest.WaitFor(t, 10*time.Second, "the expiry counted", func() bool {
		return sv.Metric("lockscope_expirations_total", map[string]string{"class": d.Class}) == 1
	})
	redistest.WaitFor(t, 10*time.Second, "the holder_expired clienttest.Incident of node/doomed", func() bool {
		for _, in := range sv.Incidents() {
			if in.Kind == "holder_expired" && slices.Equal(in.Keys, []string{key}) && slices.Equal(in.Owners, []string{"node/doomed"}) && in.EndedBy == "expired" {
				return true
			}
		}
		return false
	})
}

// TestUsingLosesItsLockOnTheDashboard: a Node service works inside using(),
// its lock renewed automatically, until an operator force-releases it with
// lockscope release. Its next renewal finds the lock gone: lost, the
// routine's signal aborts, and using() rejects as node-redlock's does (its
// release finds nothing of its own). The dashboard shows the renewals with
// their headroom, the forced release and the loss.
func TestUsingLosesItsLockOnTheDashboard(t *testing.T) {
	srv, sv, party := onDashboard(t)
	const key = "scheduler:main"
	p := party("using", "--owner", "node/scheduler", "--key", key, "--ttl-ms", "3000")
	if l := p.expect(t, "holding ", 30*time.Second); strings.HasSuffix(l, "?") {
		t.Fatalf("the using() routine printed %q: its lock does not name node/scheduler", l)
	}
	d := settled(t, sv, key, func(d lockDetail) bool { return slices.Contains(d.RecentSteps(), "renewed node/scheduler") })
	for _, e := range d.Recent {
		if e.Type == "renewed" && (e.TTL != 3 || e.Headroom <= 0 || e.Headroom > 3) {
			t.Errorf("renewal with TTL %vs, headroom %vs; want 3s and the part of it that was left", e.TTL, e.Headroom)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, redistest.Lockscope(t), "release", key, "--redis", srv.URL(), "--reason", "stuck scheduler", "--operator-user", "alice", "--yes").CombinedOutput()
	if err != nil {
		t.Fatalf("lockscope release: %v\n%s", err, out)
	}
	p.expect(t, "lost ExecutionError", 30*time.Second)
	p.expect(t, "using rejected ExecutionError", 30*time.Second)
	p.wait(t, 30*time.Second)

	d = settled(t, sv, key, func(d lockDetail) bool { return slices.Contains(d.RecentSteps(), "lost node/scheduler:not_owner") })
	want := []string{"acquired node/scheduler", "forced node/scheduler:stuck scheduler", "lost node/scheduler:not_owner"}
	if diff := cmp.Diff(want, without(d.RecentSteps(), "renewed ")); diff != "" {
		t.Errorf("%s's events but renewals (-want +got):\n%s", key, diff)
	}
	if d.Held {
		t.Errorf("%s still held by %q", key, d.Owner)
	}
	if n := sv.Metric("lockscope_forced_releases_total", map[string]string{"class": d.Class}); n != 1 {
		t.Errorf("lockscope_forced_releases_total{class=%q} = %v, want 1", d.Class, n)
	}
	redistest.WaitFor(t, 10*time.Second, "the forced clienttest.Incident of node/scheduler", func() bool {
		for _, in := range sv.Incidents() {
			if in.Kind == "forced" && slices.Equal(in.Keys, []string{key}) && slices.Equal(in.Owners, []string{"node/scheduler"}) {
				return true
			}
		}
		return false
	})
}

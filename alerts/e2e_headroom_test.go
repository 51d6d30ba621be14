package alerts

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestPrometheusLeaseAtRisk runs the real chain for LockLeaseAtRisk: a
// holder whose renewals land with little of their TTL left (it refreshes
// its lease late, as a starved process does) and a holder whose lease
// auto-renews on time, both through the lock library and the emitter, two
// collector replicas, and Debian's prometheus scraping both and
// evaluating the shipped rules. The late holder's class fires, once; the
// punctual one's stays quiet; and the library warned the late holder
// before each renewal (ObtainOptions.AtRisk).
func TestPrometheusLeaseAtRisk(t *testing.T) {
	t.Parallel() // mostly waits on scrapes and evaluations
	rdb := redistest.Shared(t).Client(t)
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	targets, _ := startReplicas(ctx, t, rdb, stream, state.Config{Classes: []state.ClassRule{
		{Pattern: prefix + "healthy:*", Class: "healthy:*"}, {Pattern: prefix + "starved:*", Class: "starved:*"}}},
		"lease-a", "lease-b")
	prom := startPrometheus(t, targets...)
	em := startEmitter(t, rdb, stream)

	// On time: auto-renewed every second, two thirds of the TTL left.
	punctual := lock.New(rdb, &lock.Options{Owner: "e2e/punctual", Recorder: em})
	pl, err := punctual.Obtain(ctx, prefix+"healthy:1", 3*time.Second, &lock.ObtainOptions{AutoRenew: true})
	if err != nil {
		t.Fatalf("Obtain(healthy:1) = %v", err)
	}
	t.Cleanup(func() { pl.Release(context.Background()) })

	// Late: refreshed 6.5 s after each write of an 8 s TTL, so each
	// renewal lands with at most 1.5 s left (under a quarter, 2 s): what a
	// renewal loop starved for 6 s does. The margin to the lapse is 1.5 s,
	// not a race with the host's speed.
	const ttl, late = 8 * time.Second, 6500 * time.Millisecond
	var warnMu sync.Mutex
	var warned []time.Duration
	slow := lock.New(rdb, &lock.Options{Owner: "e2e/starved", Recorder: em})
	sl, err := slow.Obtain(ctx, prefix+"starved:1", ttl, &lock.ObtainOptions{AtRisk: func(_ *lock.Lease, left time.Duration) {
		warnMu.Lock()
		warned = append(warned, left)
		warnMu.Unlock()
	}})
	if err != nil {
		t.Fatalf("Obtain(starved:1) = %v", err)
	}
	t.Cleanup(func() { sl.Release(context.Background()) })
	sent := time.Now()
	refreshErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				refreshErr <- nil
				return
			case <-time.After(time.Until(sent.Add(late))):
			}
			sent = time.Now()
			if err := sl.Refresh(ctx, ttl); err != nil {
				refreshErr <- err
				return
			}
		}
	}()

	// A minute and a half: the rate needs a few late renewals (one every
	// 6.5 s) scraped and evaluated, which a loaded host takes longer to see;
	// how long it took is logged.
	start := time.Now()
	pctx, pcancel := context.WithTimeout(ctx, 90*time.Second)
	defer pcancel()
	if !redistest.Poll(pctx, func() bool {
		select {
		case err := <-refreshErr:
			t.Fatalf("late Refresh = %v, want the lease still held", err)
		default:
		}
		var firing []alert
		for _, a := range prom.alerts(t, "LockLeaseAtRisk") {
			if a.State == "firing" {
				firing = append(firing, a)
			}
			if a.Labels["class"] != "starved:*" {
				t.Fatalf("LockLeaseAtRisk %s for class %q, want only starved:*", a.State, a.Labels["class"])
			}
		}
		if len(firing) > 0 {
			a := firing[0]
			if len(firing) != 1 || a.Labels["severity"] != "warning" {
				t.Fatalf("firing LockLeaseAtRisk = %+v, want one, severity warning", firing)
			}
			if want := "100% of the renewals of class starved:* landed with less than a quarter"; !strings.HasPrefix(a.Annotations["description"], want) {
				t.Errorf("LockLeaseAtRisk description = %q, want it to start with %q", a.Annotations["description"], want)
			}
			if a.Annotations["runbook_url"] != runbookBase+"lockleaseatrisk" {
				t.Errorf("LockLeaseAtRisk runbook_url = %q", a.Annotations["runbook_url"])
			}
			t.Logf("LockLeaseAtRisk firing %v after the late holder obtained its lock (refreshes %v into %v TTLs, for %s)",
				time.Since(start).Round(time.Millisecond), late, ttl, testFor)
			return true
		}
		return false
	}) {
		t.Fatalf("LockLeaseAtRisk not firing %v after a holder began renewing late; at-risk rate %v of %v\n%s",
			time.Since(start).Round(time.Second), prom.value(t, `sum(class:lockscope_renewals_at_risk:rate5m)`), prom.value(t, `sum(class:lockscope_renewals:rate5m)`), prom.logs())
	}
	if h := prom.value(t, `histogram_quantile(0.5, sum by (le) (rate(lockscope_renewal_headroom_seconds_bucket{class="healthy:*",instance="`+targets[0]+`"}[1m])))`); h < 1 || h > 3 {
		t.Errorf("median headroom of the punctual class = %vs, want about 2s of its 3s TTL", h)
	}
	for _, a := range prom.alerts(t, "Lock") {
		if n := a.Labels["alertname"]; n != "LockLeaseAtRisk" && isLockAlert(n) {
			t.Errorf("alert %v is %s while only LockLeaseAtRisk should be", a.Labels, a.State)
		}
	}
	warnMu.Lock()
	defer warnMu.Unlock()
	if len(warned) == 0 {
		t.Fatal("the late holder's AtRisk was never called")
	}
	for _, left := range warned {
		if left <= 0 || left > ttl/4 {
			t.Errorf("AtRisk left = %v, want in (0, %v]", left, ttl/4)
		}
	}
}

package reliability

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestSentinelFailoverUnderLoad: serve and load given the Sentinel URL form
// (master_name=), a failover while the load runs. serve must follow the new
// master: ready again and ingesting what the load writes after the failover
// (before, a serve pointed at the master sat on READONLY forever), without
// reporting a loss, and the operator commands must work through Sentinel
// too.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	bin := redistest.Lockscope(t)
	sn := redistest.StartSentinel(t)
	ctx := testCtx(t, 2*time.Minute)
	url := sn.URL()

	serve := startServe(t, bin, url, nil)
	startLockscope(t, bin, nil, "load", "--redis", url, "--key-prefix", "sn:", "--scenarios", "payments,inventory",
		"--rate", "100", "--concurrency", "4", "--report-every", "0", "--log-level", "warn")
	events := func() float64 { return serve.metrics(ctx, t).sum("lockscope_events_total") }
	if !redistest.Poll(ctx, func() bool { return events() > 200 }) {
		t.Fatalf("serve through Sentinel applied %v events, want > 200", events())
	}

	before := events()
	start := time.Now()
	if err := sn.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Sentinel switched masters %v after the failover began", time.Since(start).Round(time.Millisecond))
	ready := func() bool {
		resp, err := http.Get(serve.url("/readyz"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	if !redistest.Poll(testCtx(t, 30*time.Second), func() bool { return ready() && events() > before+200 }) {
		t.Fatalf("30s after the failover: ready %v, events %v (before the failover %v); want ready and ingesting from the new master\n%s",
			ready(), events(), before, tail(serve.out.String(), 3000))
	}
	t.Logf("serve ready and ingesting from the new master %v after the failover began", time.Since(start).Round(time.Millisecond))

	// A lock held through Sentinel on the new master: `locks` finds it
	// (the load's own holds are too short to be caught reliably). A new
	// client may ask a Sentinel that has not heard of the failover yet and
	// reach the old master: wait until all of them agree.
	if err := sn.Settled(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("every Sentinel agrees and the old master replicates %v after the failover began", time.Since(start).Round(time.Millisecond))
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: sn.Addrs()})
	defer fc.Close()
	l, err := lock.New(fc, &lock.Options{Owner: "sentinel-test"}).Obtain(ctx, "sn:held-after-failover", time.Minute, nil)
	if err != nil {
		t.Fatalf("Obtain through Sentinel after the failover: %v", err)
	}
	defer l.Release(context.Background())
	out, err := exec.CommandContext(ctx, bin, "locks", "--redis", url, "sn:held-*").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sn:held-after-failover") || !strings.Contains(string(out), "sentinel-test") {
		t.Errorf("locks through Sentinel after the failover: %v\n%s", err, out)
	}
	// Nothing was lost (Sentinel's failover waits for the replica): no
	// false "events lost", nor a loss of writes.
	if out := serve.out.String(); strings.Contains(out, "events lost") || strings.Contains(out, "Redis lost writes") {
		t.Errorf("serve reported a loss after a failover that lost nothing:\n%s", tail(out, 3000))
	}
}

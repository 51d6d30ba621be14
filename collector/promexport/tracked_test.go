package promexport

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockscope/lockscope/collector/internal/evtest"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

// lockscope_tracked_keys is the number of keys the state keeps: 0 before
// any event, the distinct keys of a workload (keys seen again count once),
// and, once the workload has more distinct keys than --max-keys, at most
// that many, equal to the keys the state lists.
func TestTrackedKeysGauge(t *testing.T) {
	want := func(t *testing.T, reg *prometheus.Registry, n int) {
		t.Helper()
		exp := "# HELP lockscope_tracked_keys Keys whose state the collector keeps in memory now (at most --max-keys; the least recently active are evicted past it).\n" +
			"# TYPE lockscope_tracked_keys gauge\nlockscope_tracked_keys " + fmtFloat(float64(n)) + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "lockscope_tracked_keys"); err != nil {
			t.Error(err)
		}
	}
	// listed counts the keys by scanning the state, not by its counter.
	listed := func(a *state.Aggregator) int { return a.Locks(state.LockQuery{}).Total }
	cycle := func(key, owner string, at time.Duration) []event.Event {
		lease := owner + "/" + key
		return []event.Event{
			evtest.Acquired(key, owner, lease, at, time.Millisecond, 1, time.Minute),
			evtest.Ended(event.Released, key, owner, lease, at+time.Millisecond, time.Millisecond, ""),
		}
	}

	t.Run("distinct", func(t *testing.T) {
		a, clk, m := newTestState(t, state.Config{})
		reg := prometheus.NewRegistry()
		if err := m.Register(reg, a); err != nil {
			t.Fatal(err)
		}
		want(t, reg, 0)
		clk.Set(evtest.T0.Add(time.Minute))
		const keys = 300
		var evs []event.Event
		for round := range 3 { // every key three times, by three owners
			for i := range keys {
				evs = append(evs, cycle(fmt.Sprintf("orders:%d", i), fmt.Sprintf("svc-%d", round), time.Duration(round)*time.Second)...)
			}
		}
		// A key held and not released counts too.
		evs = append(evs, evtest.Acquired("jobs:held", "svc-0", "H1", 5*time.Second, 0, 1, time.Hour))
		a.Apply(evs)
		a.Tick()
		if got := listed(a); got != keys+1 {
			t.Fatalf("the state lists %d keys, want %d", got, keys+1)
		}
		want(t, reg, keys+1)
	})

	t.Run("evicted", func(t *testing.T) {
		const maxKeys = 1000
		a, clk, m := newTestState(t, state.Config{MaxKeys: maxKeys})
		reg := prometheus.NewRegistry()
		if err := m.Register(reg, a); err != nil {
			t.Fatal(err)
		}
		clk.Set(evtest.T0.Add(time.Minute))
		for batch := range 10 {
			var evs []event.Event
			for i := range 1000 {
				evs = append(evs, cycle(fmt.Sprintf("jobs:%d:%d", batch, i), "svc", time.Duration(batch)*time.Second)...)
			}
			a.Apply(evs)
		}
		a.Tick()
		n := listed(a)
		if n == 0 || n > maxKeys {
			t.Fatalf("the state lists %d keys after 10 000 distinct ones, want 1..%d", n, maxKeys)
		}
		want(t, reg, n)
	})
}

// lockscope_lock_order_holds is the holds the lock-order graph knows: one
// per acquisition's lease, the same lease acquired twice (a retried XADD)
// once, and none for a watched lock (no caller lists what it held).
func TestLockOrderHoldsGauge(t *testing.T) {
	a, clk, m := newTestState(t, state.Config{})
	reg := prometheus.NewRegistry()
	if err := m.Register(reg, a); err != nil {
		t.Fatal(err)
	}
	want := func(n int) {
		t.Helper()
		exp := "# HELP lockscope_lock_order_holds Holds the lock-order graph knows by lease now: each acquisition's, until 30 s after its end or expiry (at most 131072; at the bound, ended holds are forgotten at once, without the grace, while holds end faster than it can keep them; only when all are still held does an acquisition under an unknown hold make no edge).\n" +
			"# TYPE lockscope_lock_order_holds gauge\nlockscope_lock_order_holds " + fmtFloat(float64(n)) + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "lockscope_lock_order_holds"); err != nil {
			t.Error(err)
		}
	}
	want(0)
	clk.Set(evtest.T0.Add(time.Minute))
	var evs []event.Event
	for i := range 50 {
		evs = append(evs, evtest.Acquired(fmt.Sprintf("orders:%d", i), "svc", fmt.Sprintf("L%d", i), time.Second, time.Millisecond, 1, time.Minute))
	}
	evs = append(evs, evs[0]) // retried
	watched := evtest.Acquired("rdz:invoice", "redisson x:1", "W1", time.Second, 0, 1, time.Minute)
	watched.Passive = true
	a.Apply(append(evs, watched))
	if got := a.LockOrderHolds(); got != 50 {
		t.Fatalf("LockOrderHolds() = %d, want 50", got)
	}
	want(50)
}

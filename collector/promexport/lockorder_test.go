package promexport

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockscope/lockscope/collector/internal/evtest"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

// lockscope_lock_order_inversions is 0 while every order is taken one way,
// 1 once another service takes the reverse order, and 0 again once that
// order has not been seen for the window.
func TestLockOrderInversionsGauge(t *testing.T) {
	agg, clk, m := newTestState(t, state.Config{LockOrderWindow: time.Hour})
	reg := prometheus.NewRegistry()
	if err := m.Register(reg, agg); err != nil {
		t.Fatal(err)
	}
	nested := func(key, owner, lease string, at time.Duration, held string) event.Event {
		e := evtest.Acquired(key, owner, lease, at, 0, 1, time.Minute)
		e.Reason = held
		return e
	}
	want := func(n int) {
		t.Helper()
		exp := "# HELP lockscope_lock_order_inversions Lock-order inversions now: cycles of lock classes each taken while holding the previous one, every order seen within --lock-order-window (callers taking them at once would deadlock).\n" +
			"# TYPE lockscope_lock_order_inversions gauge\nlockscope_lock_order_inversions " + fmtFloat(float64(n)) + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "lockscope_lock_order_inversions"); err != nil {
			t.Error(err)
		}
	}
	s := time.Second
	clk.Set(evtest.T0.Add(2 * s))
	agg.Apply([]event.Event{nested("invoice:1", "billing", "I1", s, ""), nested("ledger:1", "billing", "L1", s, "I1"),
		nested("order:1", "svc-a", "A1", s, ""), nested("inventory:1", "svc-a", "A2", s, "A1")})
	agg.Tick()
	want(0)
	clk.Set(evtest.T0.Add(3 * s))
	agg.Apply([]event.Event{nested("inventory:2", "svc-b", "B1", 3*s, ""), nested("order:2", "svc-b", "B2", 3*s, "B1")})
	agg.Tick()
	want(1)
	clk.Set(evtest.T0.Add(time.Hour + 2*s))
	agg.Tick()
	want(0)
}

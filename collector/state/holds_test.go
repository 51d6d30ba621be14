package state

import (
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// holdFigures returns how many hold observations class made and their sum.
func holdFigures(a *Aggregator, class string) (int, time.Duration) {
	t := tallyOf(a)
	return t.observed("hold", class), time.Duration(t.get("hold", class) * 1e9)
}

// A forced release ends the hold; the waiter takes the lock at once; the
// holder's lease finds its lock gone at its next renewal and reports it
// lost with its own (longer) hold figure. One hold, counted once, at the
// figure of its end: the forced release's. So for a declared expiry
// followed by a successor and the holder's late lost.
func TestHoldCountedOnceWhenItsHolderReportsLate(t *testing.T) {
	const ms = time.Millisecond
	forced := ended(event.Forced, "export:1", "A", "LA", 63700*ms, 63700*ms, "hung")
	forced.By = "op"
	for _, tc := range []struct {
		name   string
		script func(a *Aggregator, clk *aggClock)
		want   time.Duration // the one hold observed
	}{{
		name: "forced, successor, lost",
		script: func(a *Aggregator, clk *aggClock) {
			a.Apply([]event.Event{
				acquired("export:1", "A", "LA", 0, 0, 1, 10*time.Second),
				renewed("export:1", "A", "LA", 60*time.Second, 10*time.Second),
				forced,
				acquired("export:1", "B", "LB", 63800*ms, 30*time.Second, 3, 10*time.Second),
				ended(event.Lost, "export:1", "A", "LA", 66700*ms, 66700*ms, event.ReasonNotOwner),
				ended(event.Released, "export:1", "A", "LA", 66710*ms, 66710*ms, event.ReasonNotOwner),
			})
		},
		want: 63700 * ms,
	}, {
		name: "forced, lost, successor",
		script: func(a *Aggregator, clk *aggClock) {
			a.Apply([]event.Event{
				acquired("export:1", "A", "LA", 0, 0, 1, 10*time.Second),
				forced,
				ended(event.Lost, "export:1", "A", "LA", 66700*ms, 66700*ms, event.ReasonNotOwner),
				acquired("export:1", "B", "LB", 66800*ms, 30*time.Second, 3, 10*time.Second),
			})
		},
		want: 63700 * ms,
	}, {
		name: "expired by the grace, successor, lost",
		script: func(a *Aggregator, clk *aggClock) {
			a.Apply([]event.Event{acquired("export:1", "A", "LA", 0, 0, 1, 5*time.Second)})
			clk.Set(aggT0.Add(6500 * ms))
			a.Tick() // 1.5 s past the TTL: expired
			clk.Set(aggT0.Add(9 * time.Second))
			a.Apply([]event.Event{
				acquired("export:1", "B", "LB", 7*time.Second, 0, 1, 5*time.Second),
				ended(event.Lost, "export:1", "A", "LA", 8*time.Second, 8*time.Second, event.ReasonNotOwner),
			})
		},
		want: 5 * time.Second,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			a, clk := newTestAggregator(t, Config{})
			clk.Set(aggT0.Add(70 * time.Second))
			tc.script(a, clk)
			n, sum := holdFigures(a, "export:*")
			if n != 1 || sum != tc.want {
				t.Errorf("hold observations = %d summing %v, want 1 of %v", n, sum, tc.want)
			}
			if l := mustLock(t, a, "export:1"); !l.Held || l.Owner != "B" {
				t.Errorf("Lock(export:1) held, owner = %v, %q, want true, B: the late word ends nothing", l.Held, l.Owner)
			}
			// The successor's own hold is counted when it ends, as usual.
			a.Apply([]event.Event{ended(event.Released, "export:1", "B", "LB", 69*time.Second, 2*time.Second, "")})
			if n, _ := holdFigures(a, "export:*"); n != 2 {
				t.Errorf("hold observations after the successor's release = %d, want 2", n)
			}
		})
	}
}

// An expiration under a holder still at work (it reports its lock lost, a
// renewal failing, or a release that found the lock gone) is the dangerous
// one: two holders may have run at once. One whose holder says nothing
// more died or hangs. Expirations and the overview tell them apart.
func TestExpirationUnderAWorkingHolder(t *testing.T) {
	const ttl = 5 * time.Second
	for _, tc := range []struct {
		name    string
		late    []event.Event // after the expiry is declared at 6.5 s and B's acquisition at 7 s
		working bool
	}{
		{name: "holder died", working: false},
		{name: "lost after a successor", working: true,
			late: []event.Event{ended(event.Lost, "ledger:1", "A", "LA", 8*time.Second, 8*time.Second, event.ReasonNotOwner)}},
		{name: "renewal failed after a successor", working: true,
			late: []event.Event{ended(event.RenewFailed, "ledger:1", "A", "LA", 8*time.Second, 0, event.ReasonError)}},
		{name: "released too late", working: true,
			late: []event.Event{ended(event.Released, "ledger:1", "A", "LA", 8*time.Second, 8*time.Second, event.ReasonNotOwner)}},
		{name: "another lease's lost", working: false,
			late: []event.Event{ended(event.Lost, "ledger:1", "C", "LC", 8*time.Second, time.Second, event.ReasonNotOwner)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, clk := newTestAggregator(t, Config{})
			a.Apply([]event.Event{acquired("ledger:1", "A", "LA", 0, 0, 1, ttl)})
			clk.Set(aggT0.Add(6500 * time.Millisecond))
			a.Tick()
			clk.Set(aggT0.Add(9 * time.Second))
			a.Apply([]event.Event{acquired("ledger:1", "B", "LB", 7*time.Second, 0, 1, ttl)})
			a.Apply(tc.late)
			exps := a.Expirations(0)
			if len(exps) != 1 || exps[0].Lease != "LA" || exps[0].HolderWorking != tc.working {
				t.Fatalf("Expirations() = %+v, want one of LA, HolderWorking %v", exps, tc.working)
			}
			o := a.Overview()
			want := int64(0)
			if tc.working {
				want = 1
			}
			if o.Expirations5m != 1 || o.ExpiredWorking5m != want {
				t.Errorf("Overview() expirations, under a working holder = %d, %d, want 1, %d", o.Expirations5m, o.ExpiredWorking5m, want)
			}
			if got := expirations(a, "ledger:*"); got != 1 {
				t.Errorf("lockscope_expirations_total = %v, want 1", got)
			}
		})
	}
}

// The holder's lost before any successor, and a lost that itself declares
// the expiry (the first word after the TTL), both mark the holder working,
// once.
func TestExpirationUnderAWorkingHolderWithoutSuccessor(t *testing.T) {
	const ttl = 5 * time.Second
	a, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(9 * time.Second))
	a.Apply([]event.Event{
		acquired("ledger:1", "A", "LA", 0, 0, 1, ttl),
		ended(event.Lost, "ledger:1", "A", "LA", 6*time.Second, 6*time.Second, event.ReasonNotOwner), // declares the expiry
		ended(event.Released, "ledger:1", "A", "LA", 6100*time.Millisecond, 0, event.ReasonNotOwner),
		acquired("ledger:2", "A", "L2", 0, 0, 1, ttl),
	})
	clk.Set(aggT0.Add(12 * time.Second))
	a.Tick() // ledger:2 expires by the grace
	a.Apply([]event.Event{ended(event.Lost, "ledger:2", "A", "L2", 11*time.Second, 11*time.Second, event.ReasonNotOwner)})
	got := map[string]bool{}
	for _, e := range a.Expirations(0) {
		got[e.Key] = e.HolderWorking
	}
	if len(got) != 2 || !got["ledger:1"] || !got["ledger:2"] {
		t.Errorf("Expirations() under a working holder = %v, want both", got)
	}
	if o := a.Overview(); o.Expirations5m != 2 || o.ExpiredWorking5m != 2 {
		t.Errorf("Overview() expirations, under a working holder = %d, %d, want 2, 2", o.Expirations5m, o.ExpiredWorking5m)
	}
	if n, sum := holdFigures(a, "ledger:*"); n != 2 || sum != 2*ttl {
		t.Errorf("hold observations = %d summing %v, want 2 of %v", n, sum, ttl)
	}
}

// The keyspace notification of an expiry declared before the successor's
// acquisition, arriving after it, confirms that expiry: it does not end the
// successor's hold.
func TestLateNotificationOfADeclaredExpiry(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	a.Apply([]event.Event{acquired("job:1", "A", "LA", 0, 0, 1, 5*time.Second)})
	clk.Set(aggT0.Add(6500 * time.Millisecond))
	a.Tick()
	clk.Set(aggT0.Add(7500 * time.Millisecond))
	a.Apply([]event.Event{acquired("job:1", "B", "LB", 7*time.Second, 0, 1, 5*time.Second)})
	a.KeyExpired("job:1")
	if l := mustLock(t, a, "job:1"); !l.Held || l.Owner != "B" {
		t.Errorf("Lock(job:1) held, owner = %v, %q, want true, B", l.Held, l.Owner)
	}
	if exps := a.Expirations(0); len(exps) != 1 || exps[0].Lease != "LA" || !exps[0].Confirmed {
		t.Errorf("Expirations() = %+v, want LA's, confirmed", exps)
	}
}

// Quantiles of a histogram are estimates: interpolated within the bucket,
// never above the largest observation, never a bucket's bound printed as
// if it were a value.
func TestDistributionQuantile(t *testing.T) {
	s := time.Second
	bounds := []time.Duration{s, 5 * s, 30 * s, time.Minute, 5 * time.Minute}
	for _, tc := range []struct {
		name   string
		counts []int64
		max    time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", []int64{0, 0, 0, 0, 0, 0}, 0, 0.99, 0},
		// One wait of 60.0 s: its bucket's bound (1 m) is no value, nor
		// is the next one's (5 m); the wait itself is the ceiling.
		{"one wait at a bound", []int64{0, 0, 0, 1, 0, 0}, time.Minute, 0.99, 59700 * time.Millisecond},
		{"one wait past a bound", []int64{0, 0, 0, 0, 1, 0}, time.Minute + time.Millisecond, 0.99, time.Minute + time.Millisecond},
		{"one wait of 2 m: p50", []int64{0, 0, 0, 0, 1, 0}, 2 * time.Minute, 0.5, 2 * time.Minute},
		// 100 waits: 90 under 1 s, 10 in (5 s, 30 s], the longest 12 s.
		{"p50 interpolated", []int64{90, 0, 10, 0, 0, 0}, 12 * s, 0.5, 555555555},
		{"p95 capped at the longest", []int64{90, 0, 10, 0, 0, 0}, 12 * s, 0.95, 12 * s},
		{"p91 interpolated", []int64{90, 0, 10, 0, 0, 0}, 12 * s, 0.91, 7500 * time.Millisecond},
		// Beyond the last bound: between it and the longest.
		{"overflow", []int64{0, 0, 0, 0, 0, 4}, 9 * time.Minute, 0.5, 7 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Distribution{Bounds: bounds, Counts: tc.counts, Max: tc.max}
			got := d.Quantile(tc.q)
			if diff := got - tc.want; diff < -time.Microsecond || diff > time.Microsecond {
				t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
			if got > tc.max {
				t.Errorf("Quantile(%v) = %v, above the largest observation %v", tc.q, got, tc.max)
			}
		})
	}
}

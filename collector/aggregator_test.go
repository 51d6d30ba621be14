package collector

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// aggT0 is a step-aligned instant the aggregation tests start from.
var aggT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// aggClock is an injectable clock.
type aggClock struct {
	mu sync.Mutex
	t  time.Time
}

func newAggClock() *aggClock { return &aggClock{t: aggT0} }

func (c *aggClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *aggClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *aggClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newTestAggregator returns an aggregator on a fake clock at aggT0.
func newTestAggregator(t testing.TB, cfg Config) (*Aggregator, *aggClock) {
	t.Helper()
	clk := newAggClock()
	cfg.Now = clk.Now
	return NewAggregator(cfg), clk
}

// ev builds an event at aggT0+at.
func ev(typ event.Type, key, owner, lease string, at time.Duration) event.Event {
	return event.Event{Type: typ, Key: key, Owner: owner, Lease: lease, TS: aggT0.Add(at).UnixNano()}
}

func acquired(key, owner, lease string, at, wait time.Duration, attempts int, ttl time.Duration) event.Event {
	e := ev(event.Acquired, key, owner, lease, at)
	e.Wait, e.Attempts, e.TTL = wait, attempts, ttl
	return e
}

func failed(key, owner string, at, wait time.Duration, attempts int, reason string) event.Event {
	e := ev(event.Failed, key, owner, "", at)
	e.Wait, e.Attempts, e.Reason = wait, attempts, reason
	return e
}

func ended(typ event.Type, key, owner, lease string, at, hold time.Duration, reason string) event.Event {
	e := ev(typ, key, owner, lease, at)
	e.Hold, e.Reason = hold, reason
	return e
}

func renewed(key, owner, lease string, at, ttl time.Duration) event.Event {
	e := ev(event.Renewed, key, owner, lease, at)
	e.TTL = ttl
	return e
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// TestMetricsScripted applies a scripted sequence with a fake clock and
// compares the whole exposition (histograms checked separately).
func TestMetricsScripted(t *testing.T) {
	a, clk := newTestAggregator(t, Config{Classes: []ClassRule{{Pattern: "payment:*"}}})
	reg := prometheus.NewPedanticRegistry()
	if err := a.Register(reg); err != nil {
		t.Fatalf("Register() = %v", err)
	}
	ms := time.Millisecond
	forced := ended(event.Forced, "orders:43", "B", "L2", 900*ms, 880*ms, "stuck")
	forced.By = "op"
	dropped := ev(event.Dropped, "", "", "", 900*ms)
	dropped.Count = 7
	clk.Set(aggT0.Add(time.Second))
	a.Apply([]event.Event{
		acquired("orders:42", "A", "L1", 0, 2*ms, 1, 10*time.Second),
		failed("orders:42", "B", 10*ms, ms, 1, event.ReasonHeld),
		acquired("orders:43", "B", "L2", 20*ms, 150*ms, 3, 10*time.Second),
		ended(event.Released, "orders:42", "A", "L1", 300*ms, 300*ms, ""),
		ev(event.Waiting, "orders:42", "B", "L3", 400*ms),                  // B waits: ended by its acquisition
		acquired("orders:42", "B", "L3", 500*ms, 600*ms, 2, 5*time.Second), // handoff A -> B
		ended(event.Released, "orders:42", "A", "L1", 510*ms, 0, event.ReasonNotOwner),
		failed("payment:abc", "C", 600*ms, 3*time.Second, 10, event.ReasonTimeout),
		failed("payment:abc", "C", 610*ms, 10*ms, 1, "weird"), // unknown reason: error
		failed("payment:abc", "C", 620*ms, 20*ms, 2, event.ReasonCanceled),
		ev(event.Waiting, "payment:abc", "D", "W1", 630*ms), // D still waits
		renewed("orders:43", "B", "L2", 700*ms, 10*time.Second),
		ended(event.RenewFailed, "orders:43", "B", "L2", 800*ms, 0, event.ReasonError),
		forced,
		dropped,
		acquired("jobs:7", "D", "L4", 100*ms, ms, 1, 30*time.Second),
		ended(event.Lost, "jobs:7", "D", "L4", 950*ms, 850*ms, event.ReasonNotOwner),
	})
	a.Malformed(2)
	a.SetStreamStats(5, 3)
	a.StreamGap(4)
	// orders:42 (L3) expires at 5.5 s; with 1 s grace Tick at 7 s declares it.
	clk.Set(aggT0.Add(7 * time.Second))
	a.Tick()
	a.KeyExpired("orders:42") // confirms, must not count again
	a.Tick()

	// The waiter figure at 7 s into the step covers 57 s (this step and
	// the five before it): completed wait time / covered time.
	want := `
# HELP lockscope_acquire_failures_total Obtain calls that gave up, by reason (timeout, canceled, error, held); unknown reasons count as error.
# TYPE lockscope_acquire_failures_total counter
lockscope_acquire_failures_total{class="jobs:*",reason="canceled"} 0
lockscope_acquire_failures_total{class="jobs:*",reason="error"} 0
lockscope_acquire_failures_total{class="jobs:*",reason="held"} 0
lockscope_acquire_failures_total{class="jobs:*",reason="timeout"} 0
lockscope_acquire_failures_total{class="orders:*",reason="canceled"} 0
lockscope_acquire_failures_total{class="orders:*",reason="error"} 0
lockscope_acquire_failures_total{class="orders:*",reason="held"} 1
lockscope_acquire_failures_total{class="orders:*",reason="timeout"} 0
lockscope_acquire_failures_total{class="payment:*",reason="canceled"} 1
lockscope_acquire_failures_total{class="payment:*",reason="error"} 1
lockscope_acquire_failures_total{class="payment:*",reason="held"} 0
lockscope_acquire_failures_total{class="payment:*",reason="timeout"} 1
# HELP lockscope_acquisitions_total Locks obtained.
# TYPE lockscope_acquisitions_total counter
lockscope_acquisitions_total{class="jobs:*"} 1
lockscope_acquisitions_total{class="orders:*"} 3
lockscope_acquisitions_total{class="payment:*"} 0
# HELP lockscope_contentions_total Acquisitions that needed more than one attempt, plus single tries refused because the lock was held.
# TYPE lockscope_contentions_total counter
lockscope_contentions_total{class="jobs:*"} 0
lockscope_contentions_total{class="orders:*"} 3
lockscope_contentions_total{class="payment:*"} 0
# HELP lockscope_events_dropped_total Events emitters reported they had to drop (sum of dropped events' counts).
# TYPE lockscope_events_dropped_total counter
lockscope_events_dropped_total 7
# HELP lockscope_events_malformed_total Stream entries that could not be decoded (acknowledged and skipped).
# TYPE lockscope_events_malformed_total counter
lockscope_events_malformed_total 2
# HELP lockscope_events_total Events applied from the stream, by type.
# TYPE lockscope_events_total counter
lockscope_events_total{type="acquired"} 4
lockscope_events_total{type="dropped"} 1
lockscope_events_total{type="expired"} 0
lockscope_events_total{type="failed"} 4
lockscope_events_total{type="forced"} 1
lockscope_events_total{type="lost"} 1
lockscope_events_total{type="released"} 2
lockscope_events_total{type="renew_failed"} 1
lockscope_events_total{type="renewed"} 1
lockscope_events_total{type="waiting"} 2
# HELP lockscope_expirations_total Holds whose TTL lapsed while held (no release or renewal), counted once per hold.
# TYPE lockscope_expirations_total counter
lockscope_expirations_total{class="jobs:*"} 0
lockscope_expirations_total{class="orders:*"} 1
lockscope_expirations_total{class="payment:*"} 0
# HELP lockscope_forced_releases_total Locks released by an operator.
# TYPE lockscope_forced_releases_total counter
lockscope_forced_releases_total{class="jobs:*"} 0
lockscope_forced_releases_total{class="orders:*"} 1
lockscope_forced_releases_total{class="payment:*"} 0
# HELP lockscope_handoffs_total Acquisitions by a different owner than the key's previous owner.
# TYPE lockscope_handoffs_total counter
lockscope_handoffs_total{class="jobs:*"} 0
lockscope_handoffs_total{class="orders:*"} 1
lockscope_handoffs_total{class="payment:*"} 0
# HELP lockscope_held_locks Locks held now.
# TYPE lockscope_held_locks gauge
lockscope_held_locks{class="jobs:*"} 0
lockscope_held_locks{class="orders:*"} 0
lockscope_held_locks{class="payment:*"} 0
# HELP lockscope_hot_key_contentions Contentions of the 10 most contended keys over the last 5 minutes (space-saving estimate), plus key="__other__" for the rest of the window.
# TYPE lockscope_hot_key_contentions gauge
lockscope_hot_key_contentions{class="__other__",key="__other__"} 0
lockscope_hot_key_contentions{class="orders:*",key="orders:42"} 2
lockscope_hot_key_contentions{class="orders:*",key="orders:43"} 1
# HELP lockscope_last_event_timestamp_seconds Unix time of the newest applied event (never later than the collector's clock).
# TYPE lockscope_last_event_timestamp_seconds gauge
lockscope_last_event_timestamp_seconds ` + fmtFloat(float64(aggT0.Add(950*ms).UnixNano())/1e9) + `
# HELP lockscope_releases_total Release calls by outcome: released, or not_owner when the lock had already passed to another owner.
# TYPE lockscope_releases_total counter
lockscope_releases_total{class="jobs:*",outcome="not_owner"} 0
lockscope_releases_total{class="jobs:*",outcome="released"} 0
lockscope_releases_total{class="orders:*",outcome="not_owner"} 1
lockscope_releases_total{class="orders:*",outcome="released"} 1
lockscope_releases_total{class="payment:*",outcome="not_owner"} 0
lockscope_releases_total{class="payment:*",outcome="released"} 0
# HELP lockscope_renewal_failures_total Renewal attempts that failed.
# TYPE lockscope_renewal_failures_total counter
lockscope_renewal_failures_total{class="jobs:*"} 0
lockscope_renewal_failures_total{class="orders:*"} 1
lockscope_renewal_failures_total{class="payment:*"} 0
# HELP lockscope_stream_gap_entries_total Stream entries trimmed away before the collector read them.
# TYPE lockscope_stream_gap_entries_total counter
lockscope_stream_gap_entries_total 4
# HELP lockscope_stream_lag_entries Stream entries not yet delivered to the consumer group.
# TYPE lockscope_stream_lag_entries gauge
lockscope_stream_lag_entries 5
# HELP lockscope_stream_pending_entries Entries delivered to the consumer group but not yet acknowledged.
# TYPE lockscope_stream_pending_entries gauge
lockscope_stream_pending_entries 3
# HELP lockscope_stuck_locks Locks held longer than their class's stuck threshold.
# TYPE lockscope_stuck_locks gauge
lockscope_stuck_locks{class="jobs:*"} 0
lockscope_stuck_locks{class="orders:*"} 0
lockscope_stuck_locks{class="payment:*"} 0
# HELP lockscope_waiters Callers waiting for a lock of the class now (from waiting events; a wait ends with its acquisition or failure, or at its deadline).
# TYPE lockscope_waiters gauge
lockscope_waiters{class="jobs:*"} 0
lockscope_waiters{class="orders:*"} 0
lockscope_waiters{class="payment:*"} 1
`
	names := []string{
		"lockscope_acquire_failures_total", "lockscope_acquisitions_total", "lockscope_contentions_total",
		"lockscope_events_dropped_total", "lockscope_events_malformed_total", "lockscope_events_total",
		"lockscope_expirations_total", "lockscope_forced_releases_total", "lockscope_handoffs_total",
		"lockscope_held_locks", "lockscope_hot_key_contentions", "lockscope_last_event_timestamp_seconds",
		"lockscope_releases_total", "lockscope_renewal_failures_total", "lockscope_stream_gap_entries_total",
		"lockscope_stream_lag_entries", "lockscope_stream_pending_entries", "lockscope_stuck_locks",
		"lockscope_waiters", "lockscope_oldest_hold_start_timestamp_seconds",
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	// Histograms: one observation per completed wait, one per ended hold.
	wantHist := map[string]map[string][2]float64{ // name -> class -> {count, sum seconds}
		"lockscope_wait_seconds": {
			"orders:*":  {4, 0.753},
			"payment:*": {3, 3.03},
			"jobs:*":    {1, 0.001},
		},
		"lockscope_hold_seconds": {
			"orders:*": {3, 0.3 + 0.88 + 5}, // released, forced, expired at its TTL
			"jobs:*":   {1, 0.85},           // lost before its TTL: not an expiration
		},
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() = %v", err)
	}
	for _, mf := range mfs {
		want, ok := wantHist[mf.GetName()]
		if !ok {
			continue
		}
		got := map[string][2]float64{}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h.GetSampleCount() == 0 {
				continue
			}
			got[labelOf(m, "class")] = [2]float64{float64(h.GetSampleCount()), h.GetSampleSum()}
			if len(h.GetBucket()) != len(durationBuckets) {
				t.Errorf("%s classic buckets = %d, want %d", mf.GetName(), len(h.GetBucket()), len(durationBuckets))
			}
			if h.GetSchema() == 0 && len(h.GetPositiveSpan()) == 0 {
				t.Errorf("%s has no native histogram buckets", mf.GetName())
			}
		}
		for class, w := range want {
			g := got[class]
			if g[0] != w[0] || !near(g[1], w[1]) {
				t.Errorf("%s{class=%q} count, sum = %v, want %v", mf.GetName(), class, g, w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s observed classes = %v, want %v", mf.GetName(), got, want)
		}
	}

	problems, err := testutil.CollectAndLint(collectorsOf(a))
	if err != nil {
		t.Fatalf("CollectAndLint() = %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	exps := a.Expirations(10)
	if len(exps) != 1 || exps[0].Key != "orders:42" || exps[0].Owner != "B" || exps[0].Lease != "L3" ||
		!exps[0].Confirmed || exps[0].Held != 5*time.Second || !exps[0].At.Equal(aggT0.Add(5500*ms)) {
		t.Errorf("Expirations() = %+v, want one confirmed orders:42 by B (L3) at 5.5 s held 5 s", exps)
	}
	fr := a.ForcedReleases(10)
	if len(fr) != 1 || fr[0].Key != "orders:43" || fr[0].Owner != "B" || fr[0].By != "op" || fr[0].Reason != "stuck" ||
		fr[0].Held != 880*ms || fr[0].Class != "orders:*" {
		t.Errorf("ForcedReleases() = %+v, want orders:43 of B by op (stuck) held 880ms", fr)
	}
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func near(a, b float64) bool {
	d := a - b
	return d < 1e-9 && d > -1e-9
}

// multiCollector lets CollectAndLint see every metric of an aggregator.
type multiCollector []prometheus.Collector

func (m multiCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m {
		c.Describe(ch)
	}
}

func (m multiCollector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m {
		c.Collect(ch)
	}
}

func collectorsOf(a *Aggregator) prometheus.Collector { return multiCollector(a.m.collectors()) }

// A passively watched acquisition's wait is unknown (a failed SET NX makes
// no notification), not zero: it stays out of the wait histogram, the
// overview's wait figures and its contention ratio.
func TestPassiveAcquisitionsHaveNoKnownWait(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	reg := prometheus.NewRegistry()
	if err := agg.Register(reg); err != nil {
		t.Fatal(err)
	}
	// One instrumented acquisition that waited.
	agg.Apply([]event.Event{acquired("app:a", "svc", "l1", time.Second, 200*time.Millisecond, 3, time.Minute)})
	// Four passive ones (redis-py), whose waits nobody saw.
	for i := range 4 {
		e := acquired("py:b", "redis-py/redlock 1234abcd", "", time.Duration(2+i)*time.Second, 0, 1, time.Minute)
		e.Passive = true
		agg.Apply([]event.Event{e, ended(event.Released, "py:b", "redis-py/redlock 1234abcd", "", time.Duration(2+i)*time.Second+time.Millisecond, time.Millisecond, "")})
	}
	clk.Set(aggT0.Add(7 * time.Second))
	o := agg.Overview()
	if o.ContentionRatio != 1 {
		t.Errorf("ContentionRatio = %v, want 1 (one contended of one acquisition with a known wait)", o.ContentionRatio)
	}
	if o.WaitP99 < 100*time.Millisecond {
		t.Errorf("WaitP99 = %v, want the instrumented wait's bucket, not pulled down by unknown waits", o.WaitP99)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "lockscope_wait_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "class" && strings.HasPrefix(l.GetValue(), "py:") && m.GetHistogram().GetSampleCount() != 0 {
					t.Errorf("lockscope_wait_seconds{class=%q} has %d samples, want none from passive acquisitions", l.GetValue(), m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	d, ok := agg.Lock("py:b")
	if !ok || d.Wait.Count != 0 || d.Acquisitions != 4 {
		t.Errorf("Lock(py:b) wait count %d, acquisitions %d; want 0 and 4", d.Wait.Count, d.Acquisitions)
	}
}

// A held watched key without a TTL (taken for a lock with WatchNoTTL) is
// counted by lockscope_locks_without_expiry until it is released.
func TestLocksWithoutExpiryGauge(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	reg := prometheus.NewRegistry()
	if err := agg.Register(reg); err != nil {
		t.Fatal(err)
	}
	py := acquired("py:report-1", "redis-py/redlock 1234abcd", "", time.Second, 0, 1, 0)
	py.Passive = true
	timed := acquired("py:report-2", "redis-py/redlock 5678abcd", "", time.Second, 0, 1, time.Minute)
	timed.Passive = true
	own := acquired("app:job-1", "svc", "l1", time.Second, 0, 1, time.Minute)
	agg.Apply([]event.Event{py, timed, own})
	clk.Set(aggT0.Add(2 * time.Second))
	agg.Tick()
	gauge := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() == "lockscope_locks_without_expiry" && m.GetLabel()[0].GetValue() == "py:report-*" {
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatal("no lockscope_locks_without_expiry{class=py:report-*}")
		return 0
	}
	if got := gauge(); got != 1 {
		t.Errorf("lockscope_locks_without_expiry{class=py:report-*} = %v, want 1", got)
	}
	agg.Apply([]event.Event{ended(event.Released, "py:report-1", "redis-py/redlock 1234abcd", "", 3*time.Second, 2*time.Second, "")})
	clk.Set(aggT0.Add(5 * time.Second))
	agg.Tick()
	if got := gauge(); got != 0 {
		t.Errorf("after the release lockscope_locks_without_expiry = %v, want 0", got)
	}
}

// A forced release of another library's lock deletes the key: the watcher
// reports a passive release at once, the forced event follows through the
// stream. The two are one forced release, whichever comes first; a passive
// release nothing explains counts as a release once it has waited.
func TestForcedReleaseOfAWatchedLockCountsOnce(t *testing.T) {
	const owner = "redis-py/redlock 1234abcd"
	passive := func(typ event.Type, key string, at time.Duration) event.Event {
		e := ev(typ, key, owner, "", at)
		e.Passive, e.TTL, e.Attempts = true, time.Minute, 1
		if typ == event.Released {
			e.Hold = at - time.Second
		}
		return e
	}
	forced := func(key string, at time.Duration) event.Event {
		e := ev(event.Forced, key, owner, "", at)
		e.By, e.Reason = "ops", "hung"
		return e
	}
	counts := func(t *testing.T, agg *Aggregator, reg *prometheus.Registry, key string) (released, forcedN float64, types []string) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch {
				case mf.GetName() == "lockscope_releases_total" && strings.Contains(m.String(), `value:"released"`):
					released += m.GetCounter().GetValue()
				case mf.GetName() == "lockscope_forced_releases_total":
					forcedN += m.GetCounter().GetValue()
				}
			}
		}
		d, _ := agg.Lock(key)
		for _, e := range d.Recent {
			types = append(types, e.Type.String())
		}
		return released, forcedN, types
	}
	for _, tc := range []struct {
		name  string
		order func(key string) []event.Event
	}{
		{"watcher first", func(key string) []event.Event {
			return []event.Event{passive(event.Released, key, 3*time.Second), forced(key, 3*time.Second+50*time.Millisecond)}
		}},
		{"stream first", func(key string) []event.Event {
			return []event.Event{forced(key, 3*time.Second), passive(event.Released, key, 3*time.Second-time.Millisecond)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agg, clk := newTestAggregator(t, Config{})
			reg := prometheus.NewRegistry()
			if err := agg.Register(reg); err != nil {
				t.Fatal(err)
			}
			key := "py:job-1"
			agg.Apply([]event.Event{passive(event.Acquired, key, time.Second)})
			clk.Set(aggT0.Add(3 * time.Second))
			for _, e := range tc.order(key) {
				agg.Apply([]event.Event{e})
			}
			clk.Set(aggT0.Add(5 * time.Second))
			agg.Tick()
			released, forcedN, types := counts(t, agg, reg, key)
			if released != 0 || forcedN != 1 || strings.Join(types, ",") != "forced,acquired" {
				t.Errorf("released %v, forced %v, timeline %v; want 0, 1, [forced acquired]", released, forcedN, types)
			}
			if d, _ := agg.Lock(key); d.Held {
				t.Error("still held after the forced release")
			}
		})
	}
	t.Run("a plain release waits, then counts", func(t *testing.T) {
		agg, clk := newTestAggregator(t, Config{})
		reg := prometheus.NewRegistry()
		if err := agg.Register(reg); err != nil {
			t.Fatal(err)
		}
		key := "py:job-2"
		agg.Apply([]event.Event{passive(event.Acquired, key, time.Second)})
		clk.Set(aggT0.Add(3 * time.Second))
		agg.Apply([]event.Event{passive(event.Released, key, 3*time.Second)})
		clk.Set(aggT0.Add(3*time.Second + parkFor))
		agg.Tick()
		released, forcedN, types := counts(t, agg, reg, key)
		if released != 1 || forcedN != 0 || strings.Join(types, ",") != "released,acquired" {
			t.Errorf("released %v, forced %v, timeline %v; want 1, 0, [released acquired]", released, forcedN, types)
		}
		if d, _ := agg.Lock(key); d.Held || d.Hold.Count != 1 {
			t.Errorf("held %v, holds %d; want free with one hold", d.Held, d.Hold.Count)
		}
	})
	t.Run("a new holder follows the parked release", func(t *testing.T) {
		agg, clk := newTestAggregator(t, Config{})
		key := "py:job-3"
		agg.Apply([]event.Event{passive(event.Acquired, key, time.Second)})
		clk.Set(aggT0.Add(3 * time.Second))
		agg.Apply([]event.Event{passive(event.Released, key, 3*time.Second), passive(event.Acquired, key, 3*time.Second+time.Millisecond)})
		d, _ := agg.Lock(key)
		var types []string
		for _, e := range d.Recent {
			types = append(types, e.Type.String())
		}
		if !d.Held || d.Hold.Count != 1 || strings.Join(types, ",") != "acquired,released,acquired" {
			t.Errorf("held %v, holds %d, timeline %v; want the new hold after the old one's release", d.Held, d.Hold.Count, types)
		}
	})
}

package promexport

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/lockscope/lockscope/collector/internal/evtest"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

// newTestState returns a state on a fake clock at evtest.T0 counting into
// m, whose mirrored gauges read it; m is not registered.
func newTestState(t testing.TB, cfg state.Config) (*state.Aggregator, *evtest.Clock, *Metrics) {
	t.Helper()
	clk := evtest.NewClock()
	m := New()
	cfg.Now, cfg.Metrics = clk.Now, m
	a := state.New(cfg)
	m.readFrom(a)
	return a, clk, m
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// TestMetricsScripted applies a scripted sequence with a fake clock and
// compares the whole exposition (histograms checked separately).
func TestMetricsScripted(t *testing.T) {
	a, clk, m := newTestState(t, state.Config{Classes: []state.ClassRule{{Pattern: "payment:*"}},
		StuckRules: []state.StuckRule{{Pattern: "pay*", After: 2 * time.Hour}}})
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg, a); err != nil {
		t.Fatalf("Register() = %v", err)
	}
	ms := time.Millisecond
	forced := evtest.Ended(event.Forced, "orders:43", "B", "L2", 900*ms, 880*ms, "stuck")
	forced.By = "op"
	dropped := evtest.Ev(event.Dropped, "", "", "", 900*ms)
	dropped.Count = 7
	clk.Set(evtest.T0.Add(time.Second))
	a.Apply([]event.Event{
		evtest.Acquired("orders:42", "A", "L1", 0, 2*ms, 1, 10*time.Second),
		evtest.Failed("orders:42", "B", 10*ms, ms, 1, event.ReasonHeld),
		evtest.Acquired("orders:43", "B", "L2", 20*ms, 150*ms, 3, 10*time.Second),
		evtest.Ended(event.Released, "orders:42", "A", "L1", 300*ms, 300*ms, ""),
		evtest.Ev(event.Waiting, "orders:42", "B", "L3", 400*ms),                  // B waits: ended by its acquisition
		evtest.Acquired("orders:42", "B", "L3", 500*ms, 600*ms, 2, 5*time.Second), // handoff A -> B
		evtest.Ended(event.Released, "orders:42", "A", "L1", 510*ms, 0, event.ReasonNotOwner),
		evtest.Failed("payment:abc", "C", 600*ms, 3*time.Second, 10, event.ReasonTimeout),
		evtest.Failed("payment:abc", "C", 610*ms, 10*ms, 1, "weird"), // unknown reason: error
		evtest.Failed("payment:abc", "C", 620*ms, 20*ms, 2, event.ReasonCanceled),
		evtest.Ev(event.Waiting, "payment:abc", "D", "W1", 630*ms), // D still waits
		evtest.Renewed("orders:43", "B", "L2", 700*ms, 10*time.Second),
		evtest.Ended(event.RenewFailed, "orders:43", "B", "L2", 800*ms, 0, event.ReasonError),
		forced,
		dropped,
		evtest.Acquired("jobs:7", "D", "L4", 100*ms, ms, 1, 30*time.Second),
		evtest.Ended(event.Lost, "jobs:7", "D", "L4", 950*ms, 850*ms, event.ReasonNotOwner),
	})
	a.Malformed(2)
	a.SetStreamStats(5, 3)
	a.StreamGap(4)
	// orders:42 (L3) expires at 5.5 s; with 1 s grace Tick at 7 s declares it.
	clk.Set(evtest.T0.Add(7 * time.Second))
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
lockscope_events_total{type="fence_rejected"} 0
lockscope_events_total{type="forced"} 1
lockscope_events_total{type="lost"} 1
lockscope_events_total{type="released"} 2
lockscope_events_total{type="renew_failed"} 1
lockscope_events_total{type="renewed"} 1
lockscope_events_total{type="requested"} 0
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
# HELP lockscope_last_event_timestamp_seconds Unix time of the newest applied event (never later than the collector's clock); absent until one is known.
# TYPE lockscope_last_event_timestamp_seconds gauge
lockscope_last_event_timestamp_seconds ` + fmtFloat(float64(evtest.T0.Add(950*ms).UnixNano())/1e9) + `
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
# HELP lockscope_stuck_threshold_seconds The class's stuck threshold: --stuck-after, or the first CLASS_GLOB=DURATION entry matching the class.
# TYPE lockscope_stuck_threshold_seconds gauge
lockscope_stuck_threshold_seconds{class="jobs:*"} 300
lockscope_stuck_threshold_seconds{class="orders:*"} 300
lockscope_stuck_threshold_seconds{class="payment:*"} 7200
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
		"lockscope_stuck_threshold_seconds", "lockscope_waiters", "lockscope_oldest_hold_start_timestamp_seconds",
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

	problems, err := testutil.CollectAndLint(collectorsOf(m))
	if err != nil {
		t.Fatalf("CollectAndLint() = %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	exps := a.Expirations(10)
	if len(exps) != 1 || exps[0].Key != "orders:42" || exps[0].Owner != "B" || exps[0].Lease != "L3" ||
		!exps[0].Confirmed || exps[0].Held != 5*time.Second || !exps[0].At.Equal(evtest.T0.Add(5500*ms)) {
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

func collectorsOf(m *Metrics) prometheus.Collector { return multiCollector(m.collectors()) }

// A held watched key without a TTL (taken for a lock with WatchNoTTL) is
// counted by lockscope_locks_without_expiry until it is released.
func TestLocksWithoutExpiryGauge(t *testing.T) {
	agg, clk, m := newTestState(t, state.Config{})
	reg := prometheus.NewRegistry()
	if err := m.Register(reg, agg); err != nil {
		t.Fatal(err)
	}
	py := evtest.Acquired("py:report-1", "redis-py/redlock 1234abcd", "", time.Second, 0, 1, 0)
	py.Passive = true
	timed := evtest.Acquired("py:report-2", "redis-py/redlock 5678abcd", "", time.Second, 0, 1, time.Minute)
	timed.Passive = true
	own := evtest.Acquired("app:job-1", "svc", "l1", time.Second, 0, 1, time.Minute)
	agg.Apply([]event.Event{py, timed, own})
	clk.Set(evtest.T0.Add(2 * time.Second))
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
	agg.Apply([]event.Event{evtest.Ended(event.Released, "py:report-1", "redis-py/redlock 1234abcd", "", 3*time.Second, 2*time.Second, "")})
	clk.Set(evtest.T0.Add(5 * time.Second))
	agg.Tick()
	if got := gauge(); got != 0 {
		t.Errorf("after the release lockscope_locks_without_expiry = %v, want 0", got)
	}
}

// TestHotKeyCollector checks that a key leaving the top 10 disappears from
// the exposition at the next scrape and that __other__ holds the rest.
func TestHotKeyCollector(t *testing.T) {
	a, clk, m := newTestState(t, state.Config{})
	clk.Set(evtest.T0.Add(time.Second))
	var evs []event.Event
	for i := 1; i <= 11; i++ {
		evs = append(evs, evtest.Contend(fmt.Sprintf("k:%02d", i), i, time.Millisecond, 0)...)
	}
	a.Apply(evs)
	expo := func(keys ...string) string {
		var b strings.Builder
		b.WriteString("# HELP lockscope_hot_key_contentions Contentions of the 10 most contended keys over the last 5 minutes (space-saving estimate), plus key=\"__other__\" for the rest of the window.\n")
		b.WriteString("# TYPE lockscope_hot_key_contentions gauge\n")
		for _, k := range keys {
			b.WriteString(k + "\n")
		}
		return b.String()
	}
	want := expo(
		`lockscope_hot_key_contentions{class="__other__",key="__other__"} 1`,
		`lockscope_hot_key_contentions{class="k:*",key="k:02"} 2`,
		`lockscope_hot_key_contentions{class="k:*",key="k:03"} 3`,
		`lockscope_hot_key_contentions{class="k:*",key="k:04"} 4`,
		`lockscope_hot_key_contentions{class="k:*",key="k:05"} 5`,
		`lockscope_hot_key_contentions{class="k:*",key="k:06"} 6`,
		`lockscope_hot_key_contentions{class="k:*",key="k:07"} 7`,
		`lockscope_hot_key_contentions{class="k:*",key="k:08"} 8`,
		`lockscope_hot_key_contentions{class="k:*",key="k:09"} 9`,
		`lockscope_hot_key_contentions{class="k:*",key="k:10"} 10`,
		`lockscope_hot_key_contentions{class="k:*",key="k:11"} 11`,
	)
	if err := testutil.CollectAndCompare(m.hot, strings.NewReader(want)); err != nil {
		t.Errorf("first scrape: %v", err)
	}
	a.Apply(evtest.Contend("k:01", 20, time.Millisecond, 0)) // k:01 climbs to the top, k:02 drops out
	want = expo(
		`lockscope_hot_key_contentions{class="__other__",key="__other__"} 2`,
		`lockscope_hot_key_contentions{class="k:*",key="k:01"} 21`,
		`lockscope_hot_key_contentions{class="k:*",key="k:03"} 3`,
		`lockscope_hot_key_contentions{class="k:*",key="k:04"} 4`,
		`lockscope_hot_key_contentions{class="k:*",key="k:05"} 5`,
		`lockscope_hot_key_contentions{class="k:*",key="k:06"} 6`,
		`lockscope_hot_key_contentions{class="k:*",key="k:07"} 7`,
		`lockscope_hot_key_contentions{class="k:*",key="k:08"} 8`,
		`lockscope_hot_key_contentions{class="k:*",key="k:09"} 9`,
		`lockscope_hot_key_contentions{class="k:*",key="k:10"} 10`,
		`lockscope_hot_key_contentions{class="k:*",key="k:11"} 11`,
	)
	if err := testutil.CollectAndCompare(m.hot, strings.NewReader(want)); err != nil {
		t.Errorf("second scrape: %v", err)
	}
	// Past the window, only the remainder series stays.
	clk.Add(6 * time.Minute)
	if err := testutil.CollectAndCompare(m.hot, strings.NewReader(expo(`lockscope_hot_key_contentions{class="__other__",key="__other__"} 0`))); err != nil {
		t.Errorf("scrape after the window: %v", err)
	}
}

// TestHotKeyLabels checks hostile keys become valid, distinct-or-merged
// label values that a registry accepts.
func TestHotKeyLabels(t *testing.T) {
	a, clk, m := newTestState(t, state.Config{})
	clk.Set(evtest.T0.Add(time.Second))
	long := strings.Repeat("k", 10_000)
	a.Apply(append(append(append(evtest.Contend("bad:\xff", 2, 0, 0), evtest.Contend("bad:\xfe", 1, 0, 0)...), evtest.Contend(long, 1, 0, 0)...),
		evtest.Contend("esc:\x1b[31mred\x1b[0m\n", 4, 0, 0)...))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.hot)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() = %v", err)
	}
	got := map[string]float64{}
	for _, m := range mfs[0].GetMetric() {
		got[labelOf(m, "key")] = m.GetGauge().GetValue()
	}
	// "\xff" and "\xfe" both sanitise to U+FFFD: merged into one series.
	if got["bad:\uFFFD"] != 3 {
		t.Errorf("hot key labels = %v, want bad:\\uFFFD = 3 (two keys merged)", got)
	}
	// Control characters never reach a terminal running curl /metrics.
	if got["esc:?[31mred?[0m?"] != 4 {
		t.Errorf("hot key labels = %v, want the ESC key as esc:?[31mred?[0m? = 4", got)
	}
	for k := range got {
		if hasControl(k) {
			t.Errorf("hot key label %q carries a control character", k)
		}
		if len(k) > maxKeyLabelLen+len("…") {
			t.Errorf("hot key label of %d bytes, want at most %d", len(k), maxKeyLabelLen+3)
		}
	}
}

// TestRenewalHeadroomHistograms: a renewal's headroom is exposed in seconds
// and as a fraction of the TTL it renewed, with buckets the alert reads
// (le="0.25").
func TestRenewalHeadroomHistograms(t *testing.T) {
	a, clk, m := newTestState(t, state.Config{})
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg, a); err != nil {
		t.Fatalf("Register() = %v", err)
	}
	ren := func(at, headroom time.Duration) event.Event {
		e := evtest.Renewed("job:1", "A", "L1", at, 30*time.Second)
		e.Headroom = headroom
		return e
	}
	clk.Set(evtest.T0.Add(time.Minute))
	a.Apply([]event.Event{
		evtest.Acquired("job:1", "A", "L1", 0, 0, 1, 30*time.Second),
		ren(10*time.Second, 20*time.Second),       // on time: 2/3 left
		ren(35*time.Second, 5*time.Second),        // late: 1/6 left
		ren(44*time.Second, 200*time.Millisecond), // nearly lapsed
	})
	want := `
# HELP lockscope_renewal_headroom_ratio TTL left when a renewal landed, as a fraction of the TTL it renewed (renewals every ttl/3 land near 0.67).
# TYPE lockscope_renewal_headroom_ratio histogram
lockscope_renewal_headroom_ratio_bucket{class="job:*",le="0.05"} 1
lockscope_renewal_headroom_ratio_bucket{class="job:*",le="0.1"} 1
lockscope_renewal_headroom_ratio_bucket{class="job:*",le="0.15"} 1
lockscope_renewal_headroom_ratio_bucket{class="job:*",le="0.25"} 2
lockscope_renewal_headroom_ratio_bucket{class="job:*",le="0.35"} 2
lockscope_renewal_headroom_ratio_bucket{class="job:*",le="0.5"} 2
lockscope_renewal_headroom_ratio_bucket{class="job:*",le="0.6"} 2
lockscope_renewal_headroom_ratio_bucket{class="job:*",le="0.7"} 3
lockscope_renewal_headroom_ratio_bucket{class="job:*",le="0.8"} 3
lockscope_renewal_headroom_ratio_bucket{class="job:*",le="0.9"} 3
lockscope_renewal_headroom_ratio_bucket{class="job:*",le="1"} 3
lockscope_renewal_headroom_ratio_bucket{class="job:*",le="+Inf"} 3
lockscope_renewal_headroom_ratio_sum{class="job:*"} ` + fmtFloat(20.0/30+5.0/30+0.2/30) + `
lockscope_renewal_headroom_ratio_count{class="job:*"} 3
# HELP lockscope_renewal_headroom_seconds TTL left when a renewal landed, as its emitter measured it (the lower bound, for the library): how close the lease came to lapsing.
# TYPE lockscope_renewal_headroom_seconds histogram
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="0.001"} 0
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="0.0025"} 0
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="0.005"} 0
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="0.01"} 0
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="0.025"} 0
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="0.05"} 0
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="0.1"} 0
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="0.25"} 1
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="0.5"} 1
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="1"} 1
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="2.5"} 1
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="5"} 2
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="10"} 2
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="20"} 3
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="30"} 3
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="60"} 3
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="120"} 3
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="300"} 3
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="600"} 3
lockscope_renewal_headroom_seconds_bucket{class="job:*",le="+Inf"} 3
lockscope_renewal_headroom_seconds_sum{class="job:*"} 25.2
lockscope_renewal_headroom_seconds_count{class="job:*"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "lockscope_renewal_headroom_seconds", "lockscope_renewal_headroom_ratio"); err != nil {
		t.Error(err)
	}
}

// A state that has applied no event yet (a replica rebuilding its picture
// after a restart) exports no last-event time at all: a 0 would read as an
// event stream silent since 1970 and set LockscopeEventsStale pending.
func TestLastEventAbsentUntilKnown(t *testing.T) {
	a, clk, m := newTestState(t, state.Config{})
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg, a); err != nil {
		t.Fatal(err)
	}
	const name = "lockscope_last_event_timestamp_seconds"
	if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 0 {
		t.Fatalf("before any event: %d series of %s (err %v), want none", n, name, err)
	}
	a.Tick() // a tick without events knows no event either
	if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 0 {
		t.Fatalf("after a tick: %d series of %s (err %v), want none", n, name, err)
	}
	clk.Set(evtest.T0.Add(time.Second))
	a.Replay([]event.Event{evtest.Acquired("jobs:1", "A", "L1", 250*time.Millisecond, 0, 1, time.Minute)}, false)
	want := fmt.Sprintf("# HELP %s Unix time of the newest applied event (never later than the collector's clock); absent until one is known.\n# TYPE %s gauge\n%s %s\n",
		name, name, name, fmtFloat(float64(evtest.T0.Add(250*time.Millisecond).UnixNano())/1e9))
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), name); err != nil {
		t.Errorf("after a replayed event: %v", err)
	}
}

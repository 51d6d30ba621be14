package promexport

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/prometheus/client_golang/prometheus"
)

// This file holds every lockscope_ metric: names, help texts, labels and
// buckets. Counters and histograms are ordinary vectors whose children are
// resolved once per class (so Apply never hashes label values); gauges that
// mirror state (held, waiters, stuck, oldest hold, hot keys) are custom
// Collectors producing const metrics at scrape time, so a class or key that
// disappears from the state disappears from the exposition.

const namespace = "lockscope"

// durationBuckets are the classic buckets of the wait and hold histograms:
// 1 ms to 5 min. Native histogram buckets are kept alongside.
var durationBuckets = durationBounds[:]

var durationBounds = [...]float64{
	.001, .0025, .005, .01, .025, .05, .1, .25, .5,
	1, 2.5, 5, 10, 30, 60, 120, 300,
}

// headroomBuckets are the classic buckets of the renewal headroom
// histogram: leases run from 100 ms to many minutes, and the headroom that
// matters is a small part of one (a 30 s lease renewed with 200 ms left).
var headroomBuckets = []float64{
	.001, .0025, .005, .01, .025, .05, .1, .25, .5,
	1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600,
}

// headroomRatioBuckets are the buckets of the headroom as a fraction of the
// TTL: renewals sent every ttl/3 land with about 2/3 left; the alert
// (LockLeaseAtRisk) counts those under 0.25.
var headroomRatioBuckets = []float64{.05, .1, .15, .25, .35, .5, .6, .7, .8, .9, 1}

// Label value limits for the hot-key gauge: keys are arbitrary bytes, label
// values must be valid UTF-8 and should stay short.
const maxKeyLabelLen = 200

// hotKeyOther is the key (and class) label of the remainder series.
const hotKeyOther = "__other__"

// Metrics are every lockscope_ metric of the collector. They implement
// state.Metrics, through which the state counts, and mirror the state's
// gauges at each scrape (see Register).
type Metrics struct {
	acquisitions    *prometheus.CounterVec
	contentions     *prometheus.CounterVec
	failures        *prometheus.CounterVec
	wait            *prometheus.HistogramVec
	hold            *prometheus.HistogramVec
	releases        *prometheus.CounterVec
	expirations     *prometheus.CounterVec
	renewalFailures *prometheus.CounterVec
	forced          *prometheus.CounterVec
	handoffs        *prometheus.CounterVec
	headroom        *prometheus.HistogramVec
	headroomRatio   *prometheus.HistogramVec
	releaseRequests *prometheus.CounterVec

	events    *prometheus.CounterVec
	malformed prometheus.Counter
	dropped   prometheus.Counter
	streamGap prometheus.Counter
	lag       prometheus.Gauge
	pending   prometheus.Gauge
	deadlocks prometheus.Counter
	incidents *prometheus.CounterVec
	cut       *prometheus.CounterVec

	incidentsMalformed prometheus.Counter

	state *stateCollector
	hot   *hotKeyCollector

	overlaps       *prometheus.CounterVec
	overlapSeconds *prometheus.HistogramVec

	now func() time.Time // paces the exemplars (exemplarEvery)
}

// exemplarLabel names the trace id in the exemplars of the wait and hold
// histograms: the label Grafana's exemplar links read by default.
const exemplarLabel = "trace_id"

// exemplarEvery is how often a bucket of a wait or hold histogram takes a
// new exemplar at most. A bucket shows one exemplar, the latest, and a
// scrape every few seconds reads it: replacing it for every traced call of
// a busy class (an exemplar costs some ten allocations) would keep none
// more. The first traced observation of a quiet bucket (a rare long wait)
// always gets in.
const exemplarEvery = time.Second

// exemplars observes the waits or holds of traced calls of one class: with
// their trace id as the exemplar (shown in the OpenMetrics exposition, kept
// by a Prometheus with exemplar storage) when the bucket has had none for
// exemplarEvery, plainly otherwise. The state calls it only for traced
// observations, so the untraced ones cost what they did.
type exemplars struct {
	h    prometheus.Observer
	x    prometheus.ExemplarObserver
	now  func() time.Time
	last *[len(durationBounds) + 1]atomic.Int64 // per bucket: unix ns of its newest exemplar
}

func (m *Metrics) exemplars(h prometheus.Observer) exemplars {
	return exemplars{h: h, x: h.(prometheus.ExemplarObserver), now: m.now, last: new([len(durationBounds) + 1]atomic.Int64)}
}

func (e exemplars) ObserveTraced(v float64, trace event.TraceID) {
	b := &e.last[sort.SearchFloat64s(durationBuckets, v)] // the bucket v is counted in (le)
	now := e.now().UnixNano()
	if last := b.Load(); now-last < int64(exemplarEvery) || !b.CompareAndSwap(last, now) {
		e.h.Observe(v)
		return
	}
	e.x.ObserveWithExemplar(v, prometheus.Labels{exemplarLabel: trace.String()})
}

// durationHistogram returns a histogram of durations by class (the wait,
// the hold, the renewal headroom);
// observations of traced calls carry their trace id as an exemplar (see
// exemplars).
func durationHistogram(name, help string, buckets []float64) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace:                       namespace,
		Name:                            name,
		Help:                            help,
		Buckets:                         buckets,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	}, []string{"class"})
}

var _ state.Metrics = (*Metrics)(nil)

// New returns the metrics, not yet registered.
func New() *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help})
	}
	m := &Metrics{
		now:          time.Now,
		acquisitions: counter("acquisitions_total", "Locks obtained.", "class"),
		contentions: counter("contentions_total",
			"Acquisitions that needed more than one attempt, plus single tries refused because the lock was held.", "class"),
		failures: counter("acquire_failures_total",
			"Obtain calls that gave up, by reason (timeout, canceled, error, held); unknown reasons count as error.", "class", "reason"),
		wait: durationHistogram("wait_seconds",
			"Time callers spent obtaining a lock, for acquisitions and failed obtains alike.", durationBuckets),
		hold: durationHistogram("hold_seconds",
			"Time locks were held, observed once per hold when it ends (released, lost, expired or forced).", durationBuckets),
		headroom: durationHistogram("renewal_headroom_seconds",
			"TTL left when a renewal landed, as its emitter measured it (the lower bound, for the library): how close the lease came to lapsing.", headroomBuckets),
		headroomRatio: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "renewal_headroom_ratio",
			Help:    "TTL left when a renewal landed, as a fraction of the TTL it renewed (renewals every ttl/3 land near 0.67).",
			Buckets: headroomRatioBuckets}, []string{"class"}),
		releases: counter("releases_total",
			"Release calls by outcome: released, or not_owner when the lock had already passed to another owner.", "class", "outcome"),
		expirations: counter("expirations_total",
			"Holds whose TTL lapsed while held (no release or renewal), counted once per hold.", "class"),
		renewalFailures: counter("renewal_failures_total", "Renewal attempts that failed.", "class"),
		forced:          counter("forced_releases_total", "Locks released by an operator.", "class"),
		handoffs:        counter("handoffs_total", "Acquisitions by a different owner than the key's previous owner.", "class"),
		events:          counter("events_total", "Events applied from the stream, by type.", "type"),
		malformed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "events_malformed_total",
			Help: "Stream entries that could not be decoded (acknowledged and skipped)."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "events_dropped_total",
			Help: "Events emitters reported they had to drop (sum of dropped events' counts)."}),
		streamGap: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "stream_gap_entries_total",
			Help: "Stream entries trimmed away before the collector read them."}),
		lag:     gauge("stream_lag_entries", "Stream entries not yet delivered to the consumer group."),
		pending: gauge("stream_pending_entries", "Entries delivered to the consumer group but not yet acknowledged."),
		deadlocks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "deadlocks_detected_total",
			Help: "Deadlocks found: cycles in the wait-for graph, each counted once when it appears."}),
		incidents: counter("incidents_total",
			"Incidents this collector opened, by kind (stuck, deadlock, lease_lost, holder_expired, forced, wait_queue, release_request, overlap): the Grafana annotation source; the history is GET /api/v1/incidents.", "kind"),
		releaseRequests: counter("release_requests_total",
			"Holds an operator asked to release (the requested event), once per hold, by outcome: released (by its holder), forced (by an operator), ignored (the hold ended otherwise, or outlasted the request's grace by 5 minutes).", "class", "outcome"),
		cut: counter("event_fields_cut_total",
			"Event fields longer than the collector keeps, by field: owner, lease, holder and by are cut to 256 bytes, reason to 512; a key over 512 bytes is not cut, its event is skipped.", "field"),
		overlaps: counter("overlaps_total",
			"Two holders at once: a lease acquired a lock while its previous holder still believed it held it, by cause (expired: the TTL lapsed under a holder that worked on; vanished: the key disappeared without a release, expiry or forced release; forced: an operator released it while the holder worked).", "class", "cause"),
		overlapSeconds: durationHistogram("overlap_seconds",
			"How long two holders overlapped: from the second holder's acquisition to the first holder's last word (its TTL's end when it said nothing), once per overlap.", durationBuckets),
		incidentsMalformed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "incident_records_malformed_total",
			Help: "Values of the shared incident history that are not incident records: skipped by this replica's reads (each once while it stays), replaced or dropped by its writes."}),
	}
	m.state = &stateCollector{
		held: prometheus.NewDesc(namespace+"_held_locks", "Locks held now.", []string{"class"}, nil),
		waiters: prometheus.NewDesc(namespace+"_waiters",
			"Callers waiting for a lock of the class now (from waiting events; a wait ends with its acquisition or failure, or at its deadline).",
			[]string{"class"}, nil),
		oldestWait: prometheus.NewDesc(namespace+"_wait_oldest_seconds",
			"How long the longest current waiter of the class has waited; 0 when none waits.", []string{"class"}, nil),
		cycles: prometheus.NewDesc(namespace+"_deadlock_cycles",
			"Cycles in the wait-for graph now: callers that each wait for a lock another of them holds (deadlocks).", nil, nil),
		stuck: prometheus.NewDesc(namespace+"_stuck_locks", "Locks held longer than their class's stuck threshold.", []string{"class"}, nil),
		stuckAfter: prometheus.NewDesc(namespace+"_stuck_threshold_seconds",
			"The class's stuck threshold: --stuck-after, or the first CLASS_GLOB=DURATION entry matching the class.", []string{"class"}, nil),
		lastEvent: prometheus.NewDesc(namespace+"_last_event_timestamp_seconds",
			"Unix time of the newest applied event (never later than the collector's clock); absent until one is known.", nil, nil),
		noExpiry: prometheus.NewDesc(namespace+"_locks_without_expiry",
			"Locks held now without a TTL (watched keys holding a known library's token, or any value under a --watch PATTERN=any): if the holder dies they stay held.", []string{"class"}, nil),
		oldest: prometheus.NewDesc(namespace+"_oldest_hold_start_timestamp_seconds",
			"Unix time the oldest current hold began; absent while nothing of the class is held.", []string{"class"}, nil),
		lockOrderInversions: prometheus.NewDesc(namespace+"_lock_order_inversions",
			"Lock-order inversions now: cycles of lock classes each taken while holding the previous one, every order seen within --lock-order-window (callers taking them at once would deadlock).", nil, nil),
		trackedKeys: prometheus.NewDesc(namespace+"_tracked_keys",
			"Keys whose state the collector keeps in memory now (at most --max-keys; the least recently active are evicted past it).", nil, nil),
		lockOrderHolds: prometheus.NewDesc(namespace+"_lock_order_holds",
			"Holds the lock-order graph knows by lease now: each acquisition's, until 30 s after its end or expiry (at most 131072; at the bound, ended holds are forgotten at once, without the grace, while holds end faster than it can keep them; only when all are still held does an acquisition under an unknown hold make no edge).", nil, nil),
	}
	m.hot = &hotKeyCollector{desc: prometheus.NewDesc(namespace+"_hot_key_contentions",
		"Contentions of the 10 most contended keys over the last 5 minutes (space-saving estimate), plus key=\"__other__\" for the rest of the window.",
		[]string{"class", "key"}, nil)}
	return m
}

// Register registers every metric with reg. The gauges that mirror the
// state (held locks, waiters, stuck locks, hot keys, ...) read src at each
// scrape: the state that counts into m.
func (m *Metrics) Register(reg prometheus.Registerer, src State) error {
	m.readFrom(src)
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// readFrom makes the mirrored gauges read src.
func (m *Metrics) readFrom(src State) { m.state.src, m.hot.src = src, src }

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.acquisitions, m.contentions, m.failures, m.wait, m.hold, m.releases, m.expirations,
		m.renewalFailures, m.forced, m.handoffs, m.headroom, m.headroomRatio, m.events, m.malformed, m.dropped, m.streamGap,
		m.lag, m.pending, m.deadlocks, m.incidents, m.cut, m.state, m.hot,
		m.releaseRequests,
		m.overlaps, m.overlapSeconds,
		m.incidentsMalformed,
	}
}

// Totals resolves the state-wide figures (see state.Metrics).
func (m *Metrics) Totals() state.Totals {
	t := state.Totals{Malformed: m.malformed, Dropped: m.dropped, StreamGap: m.streamGap, Deadlocks: m.deadlocks,
		Lag: m.lag, Pending: m.pending}
	for _, typ := range event.Types() {
		t.Events[typ] = m.events.WithLabelValues(typ.String())
	}
	for i, k := range state.IncidentKinds {
		t.Incidents[i] = m.incidents.WithLabelValues(string(k))
	}
	for i, f := range state.CutFields {
		t.Cut[i] = m.cut.WithLabelValues(f)
	}
	return t
}

// Class resolves one class's children (see state.Metrics).
func (m *Metrics) Class(class string) state.ClassMetrics {
	wait, hold := m.wait.WithLabelValues(class), m.hold.WithLabelValues(class)
	c := state.ClassMetrics{
		Acquisitions:    m.acquisitions.WithLabelValues(class),
		Contentions:     m.contentions.WithLabelValues(class),
		Wait:            wait,
		Hold:            hold,
		WaitTraced:      m.exemplars(wait),
		HoldTraced:      m.exemplars(hold),
		Expirations:     m.expirations.WithLabelValues(class),
		RenewalFailures: m.renewalFailures.WithLabelValues(class),
		Forced:          m.forced.WithLabelValues(class),
		Handoffs:        m.handoffs.WithLabelValues(class),
		Headroom:        m.headroom.WithLabelValues(class),
		HeadroomRatio:   m.headroomRatio.WithLabelValues(class),
	}
	for i, r := range state.FailureReasons {
		c.Failures[i] = m.failures.WithLabelValues(class, r)
	}
	for i, o := range state.ReleaseOutcomes {
		c.Releases[i] = m.releases.WithLabelValues(class, o)
	}
	for i, o := range state.RequestOutcomes {
		c.ReleaseRequests[i] = m.releaseRequests.WithLabelValues(class, o)
	}
	for i, cause := range state.OverlapCauses {
		c.Overlaps[i] = m.overlaps.WithLabelValues(class, cause)
	}
	c.OverlapSeconds = m.overlapSeconds.WithLabelValues(class)
	return c
}

// IncidentsMalformed is the counter of the incident history's malformed
// values (collector.IncidentOptions.Malformed).
func (m *Metrics) IncidentsMalformed() prometheus.Counter { return m.incidentsMalformed }

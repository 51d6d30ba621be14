package state

import (
	"strconv"
	"sync"
	"testing"

	"github.com/lockscope/lockscope/collector/internal/evtest"
	"github.com/lockscope/lockscope/event"
)

// The scripted events of the tests (collector/internal/evtest).
var (
	aggT0    = evtest.T0
	ev       = evtest.Ev
	acquired = evtest.Acquired
	failed   = evtest.Failed
	ended    = evtest.Ended
	renewed  = evtest.Renewed
)

type aggClock = evtest.Clock

func newAggClock() *aggClock { return evtest.NewClock() }

// newTestAggregator returns an aggregator on a fake clock at aggT0, counting
// into a tally (see tallyOf) unless cfg has Metrics.
func newTestAggregator(t testing.TB, cfg Config) (*Aggregator, *aggClock) {
	t.Helper()
	clk := newAggClock()
	cfg.Now = clk.Now
	if cfg.Metrics == nil {
		cfg.Metrics = newTally()
	}
	return New(cfg), clk
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// tally is a Metrics that keeps what the state counts, by metric and class,
// for the tests to read: the Prometheus export is tested in its own
// package.
type tally struct {
	mu     sync.Mutex
	vals   map[string]float64 // "metric{class}" -> value
	obs    map[string]int     // "metric{class}" -> observations made
	traces map[string][]traced
}

// traced is an observation of a traced call.
type traced struct {
	v     float64
	trace event.TraceID
}

func newTally() *tally {
	return &tally{vals: make(map[string]float64), obs: make(map[string]int), traces: make(map[string][]traced)}
}

// tallyOf returns the tally a counts into.
func tallyOf(a *Aggregator) *tally { return a.met.(*tally) }

type tallied struct {
	t    *tally
	name string
}

func (c tallied) Inc()          { c.Add(1) }
func (c tallied) Add(v float64) { c.t.mu.Lock(); c.t.vals[c.name] += v; c.t.mu.Unlock() }
func (c tallied) Set(v float64) { c.t.mu.Lock(); c.t.vals[c.name] = v; c.t.mu.Unlock() }
func (c tallied) Observe(v float64) {
	c.t.mu.Lock()
	c.t.obs[c.name]++
	c.t.vals[c.name] += v // the sum
	c.t.mu.Unlock()
}

// ObserveTraced counts as Observe does and keeps the trace.
func (c tallied) ObserveTraced(v float64, trace event.TraceID) {
	c.Observe(v)
	c.t.mu.Lock()
	c.t.traces[c.name] = append(c.t.traces[c.name], traced{v, trace})
	c.t.mu.Unlock()
}

func series(metric, class string) string { return metric + "{" + class + "}" }

func (t *tally) Totals() Totals {
	c := func(name string) tallied { return tallied{t, series(name, "")} }
	tot := Totals{Malformed: c("malformed"), Dropped: c("dropped"), StreamGap: c("stream_gap"), Deadlocks: c("deadlocks"),
		Lag: c("lag"), Pending: c("pending")}
	for i := range tot.Events {
		tot.Events[i] = c("events_" + event.Type(i).String())
	}
	for i, k := range IncidentKinds {
		tot.Incidents[i] = c("incidents_" + string(k))
	}
	for i, f := range CutFields {
		tot.Cut[i] = c("cut_" + f)
	}
	return tot
}

func (t *tally) Class(name string) ClassMetrics {
	c := func(metric string) tallied { return tallied{t, series(metric, name)} }
	m := ClassMetrics{Acquisitions: c("acquisitions"), Contentions: c("contentions"), Wait: c("wait"), Hold: c("hold"),
		WaitTraced: c("wait"), HoldTraced: c("hold"),
		Expirations: c("expirations"), RenewalFailures: c("renewal_failures"), Forced: c("forced"), Handoffs: c("handoffs"),
		Headroom: c("headroom"), HeadroomRatio: c("headroom_ratio")}
	for i, r := range FailureReasons {
		m.Failures[i] = c("failures_" + r)
	}
	for i, o := range ReleaseOutcomes {
		m.Releases[i] = c("releases_" + o)
	}
	for i, o := range RequestOutcomes {
		m.ReleaseRequests[i] = c("release_requests_" + o)
	}
	for i, cause := range OverlapCauses {
		m.Overlaps[i] = c("overlaps_" + cause)
	}
	m.OverlapSeconds = c("overlap_seconds")
	return m
}

// get returns the value of metric for class ("" for a state-wide one); of
// a distribution, the sum of its observations.
func (t *tally) get(metric, class string) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.vals[series(metric, class)]
}

// tracedObs returns the observations of metric class made with a trace.
func (t *tally) tracedObs(metric, class string) []traced {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]traced(nil), t.traces[series(metric, class)]...)
}

// observed returns how many observations of metric class made.
func (t *tally) observed(metric, class string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.obs[series(metric, class)]
}

package promqltest

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/lockscope/lockscope/collector/promexport"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

// Exported returns the names of the metric families a collector exports
// after a scripted run of events that exercises every event type, a handoff,
// an expiry, a stuck hold and a forced release, mapped to their types.
func Exported(tb testing.TB) map[string]dto.MetricType {
	tb.Helper()
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	metrics := promexport.New()
	agg := state.New(state.Config{Now: clock, StuckAfter: time.Minute, Metrics: metrics})
	ts := func() int64 { return now.UnixNano() }
	step := func(d time.Duration) { now = now.Add(d); agg.Tick() }

	agg.Apply([]event.Event{
		{Type: event.Acquired, Key: "workflow:1", Owner: "app/a/1", Lease: "l1", TS: ts(), Wait: 5 * time.Millisecond, TTL: 30 * time.Second, Attempts: 1},
		{Type: event.Acquired, Key: "workflow:2", Owner: "app/b/1", Lease: "l2", TS: ts(), Wait: 300 * time.Millisecond, TTL: 30 * time.Second, Attempts: 4},
		{Type: event.Failed, Key: "workflow:2", Owner: "app/c/1", TS: ts(), Wait: time.Second, Attempts: 10, Reason: event.ReasonTimeout, Holder: "app/b/1"},
		{Type: event.Failed, Key: "workflow:2", Owner: "app/c/1", TS: ts(), Attempts: 1, Reason: event.ReasonHeld, Holder: "app/b/1"},
		{Type: event.Failed, Key: "workflow:2", Owner: "app/c/1", TS: ts(), Wait: 50 * time.Millisecond, Reason: event.ReasonCanceled},
		{Type: event.Failed, Key: "workflow:3", Owner: "app/c/1", TS: ts(), Reason: event.ReasonError},
		{Type: event.Acquired, Key: "job:7", Owner: "app/a/1", Lease: "l3", TS: ts(), TTL: time.Second, Attempts: 1},
	})
	step(time.Second)
	agg.Apply([]event.Event{
		{Type: event.Renewed, Key: "workflow:1", Owner: "app/a/1", Lease: "l1", TS: ts(), TTL: 30 * time.Second, Headroom: 29 * time.Second},
		{Type: event.RenewFailed, Key: "workflow:1", Owner: "app/a/1", Lease: "l1", TS: ts(), Reason: event.ReasonError},
		{Type: event.Released, Key: "workflow:2", Owner: "app/b/1", Lease: "l2", TS: ts(), Hold: time.Second},
		{Type: event.Acquired, Key: "workflow:2", Owner: "app/c/1", Lease: "l4", TS: ts(), Wait: 2 * time.Second, TTL: 30 * time.Second, Attempts: 5},
		{Type: event.Released, Key: "workflow:9", Owner: "app/d/1", Lease: "l9", TS: ts(), Reason: event.ReasonNotOwner},
		{Type: event.Dropped, Owner: "app/d/1", TS: ts(), Count: 3},
	})
	agg.Malformed(1)
	agg.SetStreamStats(7, 2)
	agg.StreamGap(1)
	// job:7 (TTL 1s) lapses; workflow:1 keeps renewing past StuckAfter.
	for range 4 {
		step(20 * time.Second)
		agg.Apply([]event.Event{{Type: event.Renewed, Key: "workflow:1", Owner: "app/a/1", Lease: "l1", TS: ts(), TTL: 30 * time.Second}})
	}
	agg.Apply([]event.Event{
		{Type: event.Forced, Key: "workflow:2", Owner: "app/c/1", Lease: "l4", TS: ts(), Hold: 81 * time.Second, By: "operator", Reason: "test"},
		{Type: event.Lost, Key: "workflow:5", Owner: "app/e/1", Lease: "l5", TS: ts(), Reason: event.ReasonNotOwner},
	})
	step(time.Second)

	reg := prometheus.NewPedanticRegistry()
	if err := metrics.Register(reg, agg); err != nil {
		tb.Fatalf("Register = %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatalf("Gather = %v", err)
	}
	out := map[string]dto.MetricType{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetType()
	}
	return out
}

// CheckExported fails tb for every lockscope metric referenced by exprs that
// exported (see Exported) lacks, and for every recording-rule name that is
// not in recorded. Histogram series (_bucket, _sum, _count) count as their
// histogram.
func CheckExported(tb testing.TB, exprs []Expr, exported map[string]dto.MetricType, recorded map[string]bool) {
	tb.Helper()
	for _, e := range exprs {
		for _, n := range Names(e.Expr) {
			switch {
			case strings.Contains(n, ":"):
				if !recorded[n] {
					tb.Errorf("%s: %s is not a recording rule of alerts/lockscope.rules.yml", e.Where, n)
				}
			case exportedName(n, exported):
			default:
				tb.Errorf("%s: %s is not exported by the collector; it exports %s", e.Where, n, strings.Join(sortedKeys(exported), ", "))
			}
		}
	}
}

func exportedName(n string, exported map[string]dto.MetricType) bool {
	if _, ok := exported[n]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(n, suffix); ok && exported[base] == dto.MetricType_HISTOGRAM {
			if _, ok := exported[base]; ok {
				return true
			}
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

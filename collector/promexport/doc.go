// Package promexport exports the collector's aggregation state as
// Prometheus metrics: every lockscope_ metric's name, help text, labels and
// buckets stand in metrics.go.
//
// Metrics implements state.Metrics, through which the state counts:
// counters and histograms are ordinary vectors whose children are resolved
// once, when the state starts or a class appears. The gauges that mirror
// the state (held locks, waiters, stuck locks, oldest hold, deadlock
// cycles, hot keys) are custom Collectors that read it at scrape time
// through State, an interface this package declares (gauges.go), producing
// const metrics so that a class or key gone from the state is gone from the
// exposition.
//
// Whoever wires the process owns the registry:
//
//	metrics := promexport.New()
//	agg := state.New(state.Config{Metrics: metrics})
//	if err := metrics.Register(reg, agg); err != nil { ... }
package promexport

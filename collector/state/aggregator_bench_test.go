package state_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/internal/evtest"
	"github.com/lockscope/lockscope/collector/promexport"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

// The benchmarks of this file run the state as serve runs it, counting
// into the Prometheus export: what applying an event costs includes its
// counters and histograms.

// newBenchAggregator returns an aggregator on a fake clock at evtest.T0,
// counting into the Prometheus export.
func newBenchAggregator(cfg state.Config) (*state.Aggregator, *evtest.Clock) {
	clk := evtest.NewClock()
	cfg.Now, cfg.Metrics = clk.Now, promexport.New()
	return state.New(cfg), clk
}

// benchWorkload returns n events of a realistic mix over keys distinct keys
// in 20 classes: each hold is acquired (a third after retries), renewed
// now and then and released; some tries are refused and some obtains time
// out. Timestamps advance 10 µs per event.
func benchWorkload(n, keys int) []event.Event {
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("svc%d:order:%d", i%20, i)
	}
	owners := []string{"api/host-1/101", "api/host-2/202", "worker/host-3/303", "worker/host-4/404"}
	out := make([]event.Event, 0, n)
	ts := evtest.T0.UnixNano()
	for i := 0; len(out) < n; i++ {
		key := names[(i*7919)%keys]
		owner := owners[i%len(owners)]
		lease := fmt.Sprintf("lease-%d", i)
		ts += 10_000
		att := 1 + (i%3)/2
		out = append(out, event.Event{Type: event.Acquired, Key: key, Owner: owner, Lease: lease, TS: ts,
			Wait: time.Duration(200+i%5000) * time.Microsecond, Attempts: att, TTL: 10 * time.Second})
		if i%4 == 0 {
			out = append(out, event.Event{Type: event.Renewed, Key: key, Owner: owner, Lease: lease, TS: ts + 5000, TTL: 10 * time.Second})
		}
		switch i % 10 {
		case 0:
			out = append(out, event.Event{Type: event.Failed, Key: key, Owner: owners[(i+1)%4], TS: ts + 6000,
				Wait: 300 * time.Microsecond, Attempts: 1, Reason: event.ReasonHeld, Holder: owner})
		case 5:
			out = append(out, event.Event{Type: event.Failed, Key: key, Owner: owners[(i+2)%4], TS: ts + 6000,
				Wait: 2 * time.Second, Attempts: 20, Reason: event.ReasonTimeout})
		}
		out = append(out, event.Event{Type: event.Released, Key: key, Owner: owner, Lease: lease, TS: ts + 8000,
			Hold: time.Duration(1+i%900) * time.Millisecond})
	}
	return out[:n]
}

// BenchmarkApply measures aggregation per event (metrics included) on a
// realistic mix over 10 000 keys, in batches as the ingest loop applies
// them, with Tick every 100 ms of event time.
func BenchmarkApply(b *testing.B) { benchmarkApply(b, benchWorkload(1<<16, 10_000)) }

// BenchmarkApplyTraced is BenchmarkApply with every call traced: each
// event carries a trace id, each wait and hold becomes an exemplar.
func BenchmarkApplyTraced(b *testing.B) {
	evs := benchWorkload(1<<16, 10_000)
	for i := range evs {
		evs[i].TraceID = event.TraceID{0: 1, 8: byte(i >> 8), 15: byte(i)}
		evs[i].SpanID = event.SpanID{0: 2, 7: byte(i)}
	}
	benchmarkApply(b, evs)
}

// BenchmarkApplyPassive is BenchmarkApply with every event passive, as
// the watcher writes other libraries' locks: each acquisition also ranks
// its key in the hot keys of watched keys.
func BenchmarkApplyPassive(b *testing.B) {
	evs := benchWorkload(1<<16, 10_000)
	for i := range evs {
		evs[i].Passive = true
	}
	benchmarkApply(b, evs)
}

func benchmarkApply(b *testing.B, evs []event.Event) {
	a, clk := newBenchAggregator(state.Config{})
	const batch = 256
	// Warm up: every key and class exists, the rings have grown.
	for i := 0; i < len(evs); i += batch {
		a.Apply(evs[i:min(i+batch, len(evs))])
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := evtest.CPUTime()
	n := 0
	for i := 0; i < b.N; i++ {
		off := (i * batch) % len(evs)
		chunk := evs[off:min(off+batch, len(evs))]
		clk.Add(2560 * time.Microsecond) // 10 µs per event, as the workload's timestamps
		a.Apply(chunk)
		n += len(chunk)
		if i%40 == 0 {
			a.Tick()
		}
	}
	b.ReportMetric(float64((evtest.CPUTime()-cpu0).Nanoseconds())/float64(n), "cpu-ns/event")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkApplyKeys measures aggregation per event of the serve
// benchmarks' stream (test/reliability): acquire + release pairs of keys
// distinct keys in turn, in the emitter's batches of 512. Over 500 000 keys,
// more than MaxKeys, every key is new when it comes, as order and job ids
// are, and each acquisition evicts the least recently active key. Warmed up
// by one pass over every key first: what it measures is the steady state.
//
//	go test -run '^$' -bench BenchmarkApplyKeys -benchtime 2000x ./collector/state/
func BenchmarkApplyKeys(b *testing.B) {
	for _, keys := range []int{10_000, 500_000} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) { benchmarkApplyKeys(b, keys) })
	}
}

func benchmarkApplyKeys(b *testing.B, keys int) {
	a, clk := newBenchAggregator(state.Config{})
	evs := make([]event.Event, 0, 2*keys)
	for i := range keys {
		k, lease := "order:"+strconv.Itoa(i), strconv.FormatInt(int64(i), 16)
		evs = append(evs,
			event.Event{Type: event.Acquired, Key: k, Owner: "api/host-1/42", Lease: lease, Wait: 200 * time.Microsecond, TTL: 30 * time.Second, Attempts: 1},
			event.Event{Type: event.Released, Key: k, Owner: "api/host-1/42", Lease: lease, Hold: time.Microsecond})
	}
	const batch = 512
	ts := evtest.T0.UnixNano()
	apply := func(off int) int {
		chunk := evs[off:min(off+batch, len(evs))]
		for i := range chunk {
			ts += 1000 // 1 µs apart: 1 M events/s
			chunk[i].TS = ts
		}
		clk.Set(time.Unix(0, ts))
		a.Apply(chunk)
		return len(chunk)
	}
	for off := 0; off < len(evs); {
		off += apply(off)
	}
	b.ResetTimer()
	cpu0 := evtest.CPUTime()
	n, off := 0, 0
	for i := 0; i < b.N; i++ {
		n += apply(off)
		if off += batch; off >= len(evs) {
			off = 0
		}
		if i%200 == 0 {
			a.Tick()
		}
	}
	b.ReportMetric(float64((evtest.CPUTime()-cpu0).Nanoseconds())/float64(n), "cpu-ns/event")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
}

// BenchmarkLocksPage measures one keys-page query over 100 000 tracked keys
// of which 10 000 are held.
func BenchmarkLocksPage(b *testing.B) {
	a, clk := newBenchAggregator(state.Config{})
	clk.Set(evtest.T0.Add(time.Hour))
	var evs []event.Event
	for i := range 100_000 {
		key := fmt.Sprintf("page:%d:item", i)
		lease := fmt.Sprint(i)
		evs = append(evs, event.Event{Type: event.Acquired, Key: key, Owner: "o", Lease: lease, TS: evtest.T0.UnixNano(),
			Wait: time.Duration(i) * time.Microsecond, Attempts: 1 + i%3, TTL: time.Hour})
		if i%10 != 0 {
			evs = append(evs, event.Event{Type: event.Released, Key: key, Owner: "o", Lease: lease, TS: evtest.T0.UnixNano(), Hold: time.Millisecond})
		}
	}
	a.Apply(evs)
	queries := []struct {
		name string
		q    state.LockQuery
	}{
		{"contentions", state.LockQuery{}},
		{"held-by-hold", state.LockQuery{HeldOnly: true, Sort: state.SortHold}},
		{"search", state.LockQuery{Search: "99", Sort: state.SortWait}},
		{"deep-page-by-key", state.LockQuery{Sort: state.SortKey, Offset: 50_000, Limit: 50}},
		{"page-100-by-hold", state.LockQuery{Sort: state.SortHold, Offset: 4950, Limit: 50}},
	}
	for _, q := range queries {
		b.Run(q.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := evtest.CPUTime()
			for range b.N {
				if p := a.Locks(q.q); len(p.Locks) == 0 {
					b.Fatalf("Locks(%+v) returned nothing", q.q)
				}
			}
			b.ReportMetric(float64((evtest.CPUTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkHotKeys measures a 5-minute hot-key query with full sketches.
func BenchmarkHotKeys(b *testing.B) {
	a, clk := newBenchAggregator(state.Config{})
	for s := range 31 {
		var evs []event.Event
		for i := range 3000 {
			evs = append(evs, evtest.Failed(fmt.Sprintf("hk:%d", (i*31+s)%50_000), "o", 0, time.Millisecond, 1, event.ReasonHeld))
		}
		a.Apply(evs)
		clk.Add(10 * time.Second) // one series step
	}
	b.ReportAllocs()
	for range b.N {
		a.HotKeys(5*time.Minute, state.ByContentions, 10)
	}
}

package state_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

// BenchmarkClassStats measures GET /classes' query: every class's figures
// within a window, with the default MaxClasses of 100 classes busy for the
// last hour (a sample every 10 s of each).
func BenchmarkClassStats(b *testing.B) {
	for _, w := range []time.Duration{5 * time.Minute, time.Hour} {
		b.Run(w.String(), func(b *testing.B) {
			a, clk := newBenchAggregator(state.Config{})
			for step := range 360 {
				var evs []event.Event
				for c := range 100 {
					key := fmt.Sprintf("c%d:job:%d", c, step)
					ts := clk.Now().UnixNano()
					evs = append(evs,
						event.Event{Type: event.Acquired, Key: key, Owner: "w", Lease: key, TS: ts, Attempts: 2, Wait: time.Millisecond, TTL: 5 * time.Second},
						event.Event{Type: event.Released, Key: key, Owner: "w", Lease: key, TS: ts, Hold: 100 * time.Millisecond})
				}
				a.Apply(evs)
				clk.Add(10 * time.Second)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if n := len(a.ClassStats(w)); n != 100 {
					b.Fatalf("ClassStats(%v) = %d classes, want 100", w, n)
				}
			}
		})
	}
}

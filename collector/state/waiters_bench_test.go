package state

import (
	"strconv"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// waitingCrowd returns n waiting events for one key, one per lease, a
// microsecond apart, each waiting at most wait.
func waitingCrowd(key string, n int, wait time.Duration) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = ev(event.Waiting, key, "worker-"+strconv.Itoa(i%64), "W"+strconv.Itoa(i), time.Duration(i)*time.Microsecond)
		evs[i].Wait = wait
	}
	return evs
}

// BenchmarkWaitersExpireOneKey: n callers wait for one key and die; once
// their deadlines pass, one Tick drops them all. The time per waiter stays
// flat as n grows tenfold: each removal is O(log n).
//
//	go test -run '^$' -bench BenchmarkWaitersExpireOneKey -count 6 ./collector/state/
func BenchmarkWaitersExpireOneKey(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run("waiters="+strconv.Itoa(n), func(b *testing.B) {
			evs := waitingCrowd("hot", n, time.Second)
			var spent time.Duration
			for range b.N {
				agg, clk := newTestAggregator(b, Config{})
				agg.Apply(evs)
				clk.Set(aggT0.Add(time.Minute))
				start := time.Now()
				agg.Tick()
				spent += time.Since(start)
				if w := agg.Overview().Waiters; w != 0 {
					b.Fatalf("waiters after their deadline = %d, want 0", w)
				}
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N)/float64(n), "ns/waiter")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkWaitersEndOneKey: n callers wait for one key, then each gives up
// (its failed event ends its wait), oldest first, as applied from the
// stream.
//
//	go test -run '^$' -bench BenchmarkWaitersEndOneKey -count 6 ./collector/state/
func BenchmarkWaitersEndOneKey(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run("waiters="+strconv.Itoa(n), func(b *testing.B) {
			evs := waitingCrowd("hot", n, time.Minute)
			ends := make([]event.Event, n)
			for i := range ends {
				ends[i] = failed("hot", evs[i].Owner, time.Second+time.Duration(i)*time.Microsecond, time.Second, 2, event.ReasonTimeout)
				ends[i].Lease = evs[i].Lease
			}
			var spent time.Duration
			for range b.N {
				agg, _ := newTestAggregator(b, Config{})
				agg.Apply(evs)
				start := time.Now()
				agg.Apply(ends)
				spent += time.Since(start)
				if w := agg.Overview().Waiters; w != 0 {
					b.Fatalf("waiters after each gave up = %d, want 0", w)
				}
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N)/float64(n), "ns/waiter")
			b.ReportMetric(0, "ns/op")
		})
	}
}

package lock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// BenchmarkClusterStream writes batches of 512 events of distinct keys to a
// real 3-master cluster from parallel writers (each its own sink, as each
// application process has its own emitter): all to one stream (one master
// takes every XADD) or spread over 3 partitions (event.Streams).
func BenchmarkClusterStream(b *testing.B) {
	cl := redistest.StartCluster(b).Client(b)
	ctx := context.Background()
	for _, n := range []int{1, 3} {
		b.Run("partitions="+strconv.Itoa(n), func(b *testing.B) {
			base := redistest.KeyPrefix(b) + "events"
			streams := event.Streams(base, n)
			b.Cleanup(func() {
				for _, s := range streams {
					cl.Del(ctx, s)
				}
			})
			b.SetParallelism(4)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				var s Sink = NewStreamSink(cl, base, 100_000)
				if n > 1 {
					s = NewPartitionedStreamSink(cl, base, n, 100_000)
				}
				batch := make([]event.Event, 512)
				ts := time.Now().UnixNano()
				i := 0
				for pb.Next() {
					for j := range batch {
						i++
						batch[j] = event.Event{Type: event.Acquired, Key: "order:" + strconv.Itoa(i), Owner: "api/host-1/42",
							Lease: "0123456789abcdef", TS: ts + int64(i), TTL: 30 * time.Second, Attempts: 1}
					}
					if err := s.Write(ctx, batch); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)*512/time.Since(start).Seconds(), "events/s")
		})
	}
}

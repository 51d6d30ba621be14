package lock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/redistest"
)

// BenchmarkStreamSinkEntrySize writes packed entries of n events (keys of a
// lock benchmark's length, acquire events) with XADD MAXLEN ~ 1000, as the
// lock benchmark's emitter does, to a redis-server of its own, and reports
// Redis's CPU time per event (INFO cpu): what the events cost Redis,
// which the machine's load moves less than wall time. One op is one entry.
// Issue 28: Redis's cost per event was not linear in the entry's size.
func BenchmarkStreamSinkEntrySize(b *testing.B) {
	rdb := redistest.Start(b, redistest.Options{Notify: "none"}).Client(b)
	ctx := context.Background()
	for _, n := range []int{128, 512, 1024, 2048} {
		b.Run("events="+strconv.Itoa(n), func(b *testing.B) {
			stream := redistest.KeyPrefix(b) + "events"
			s := NewStreamSink(rdb, stream, 1000)
			evs := make([]event.Event, n)
			ts := time.Now().UnixNano()
			for i := range evs {
				evs[i] = event.Event{Type: event.Acquired, Key: "bench:lockscope-events:unique:" + strconv.Itoa(i%64),
					Owner: "bench", Lease: "0123456789abcdef", TS: ts + int64(i)*1000, Wait: time.Millisecond,
					TTL: 10 * time.Second, Attempts: 1}
			}
			for range 1000 { // the stream at its trimmed length
				if err := s.Write(ctx, evs[:1]); err != nil {
					b.Fatal(err)
				}
			}
			cpu0 := redistest.ServerCPU(b, rdb)
			b.ResetTimer()
			for b.Loop() {
				if err := s.Write(ctx, evs); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((redistest.ServerCPU(b, rdb)-cpu0).Nanoseconds())/float64(b.N*n), "server-ns/event")
			rdb.Del(ctx, stream)
		})
	}
}

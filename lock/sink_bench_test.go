package lock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// BenchmarkStreamSinkEntrySize writes packed entries of n events (acquire
// events with keys of a lock benchmark's length, 73 bytes each packed) to a
// redis-server of its own and reports what they cost Redis per event: its
// CPU time (INFO cpu, which includes reading the entry off the socket) and
// the XADD's own run time (INFO commandstats). One op is one entry.
//
// Two regimes, each size on a new server so that no memory an earlier case
// freed is reused:
//   - growing: a stream below its MaxLen, as the default MaxLen (1 000 000
//     entries) leaves it for as long as the stream lives; every entry is new
//     memory for Redis. Memory grows by one entry per op: run it with a
//     bounded -benchtime (300x is 45 MB at n=2048).
//   - trimmed: a stream at its MaxLen (100 entries here), where each XADD
//     frees the oldest entry and Redis reuses its memory.
//
// Issue 28: an earlier version ran every size on one server, one after the
// other, and the later (larger) sizes reused the memory of the earlier
// streams: it showed entries of 1 024 events and more as three times
// cheaper per event than entries of 512, which is not so (BENCHMARKS.md).
func BenchmarkStreamSinkEntrySize(b *testing.B) {
	ctx := context.Background()
	for _, regime := range []string{"growing", "trimmed"} {
		for _, n := range []int{128, 512, 1024, 2048} {
			b.Run("stream="+regime+"/events="+strconv.Itoa(n), func(b *testing.B) {
				rdb := redistest.Start(b, redistest.Options{Notify: "none"}).Client(b)
				maxLen := int64(0)
				if regime == "trimmed" {
					maxLen = 100
				}
				s := NewStreamSink(rdb, "events", maxLen)
				evs := make([]event.Event, n)
				ts := time.Now().UnixNano()
				for i := range evs {
					evs[i] = event.Event{Type: event.Acquired, Key: "bench:lockscope-events:unique:" + strconv.Itoa(i%64),
						Owner: "bench", Lease: "0123456789abcdef", TS: ts + int64(i)*1000, Wait: time.Millisecond,
						TTL: 10 * time.Second, Attempts: 1}
				}
				if regime == "trimmed" {
					for range 2 * maxLen { // the stream at its trimmed length
						if err := s.Write(ctx, evs); err != nil {
							b.Fatal(err)
						}
					}
				}
				cpu0 := redistest.ServerCPU(b, rdb)
				xadd0, _ := redistest.CommandTime(b, rdb, "xadd")
				for b.Loop() {
					if err := s.Write(ctx, evs); err != nil {
						b.Fatal(err)
					}
				}
				cpu := redistest.ServerCPU(b, rdb) - cpu0
				xadd, _ := redistest.CommandTime(b, rdb, "xadd")
				events := float64(b.N * n)
				b.ReportMetric(float64(cpu.Nanoseconds())/events, "server-ns/event")
				b.ReportMetric(float64((xadd-xadd0).Nanoseconds())/events, "xadd-ns/event")
			})
		}
	}
}

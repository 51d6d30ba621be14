package redistest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Cycles runs b.N calls of cycle from callers goroutines (each with its own
// index) and reports, beside the wall clock, CPU figures that other load on
// the machine moves less: this process's CPU time per op (the library, the
// emitter and go-redis: client-ns/op) and redis-server's (server-ns/op),
// read from rdb's INFO.
func Cycles(b *testing.B, rdb *redis.Client, callers int, cycle func(ctx context.Context, caller int) error) {
	ctx := context.Background()
	for w := range callers { // warm up the connections and the scripts
		if err := cycle(ctx, w); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	server0, self0 := ServerCPU(b, rdb), SelfCPU(b)
	b.ResetTimer()
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := cycle(ctx, w); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatalf("cycle: %v", *err)
	}
	server, self := ServerCPU(b, rdb)-server0, SelfCPU(b)-self0
	b.ReportMetric(float64(self.Nanoseconds())/float64(b.N), "client-ns/op")
	b.ReportMetric(float64(server.Nanoseconds())/float64(b.N), "server-ns/op")
}

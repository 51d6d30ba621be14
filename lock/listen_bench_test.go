package lock

import (
	"context"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// BenchmarkLockCycle is one Obtain + Release (10 s TTL, one caller, one
// key) on a redis-server of its own without keyspace notifications.
// listen=no is the lock path of every application, which release requests
// must leave as it was (compare with the commit before them); listen=yes a
// hold that calls ReleaseRequested: its SUBSCRIBE and UNSUBSCRIBE run on the
// client's listener goroutine, off the path, on the Pub/Sub connection the
// client keeps. server-ns/op is redis-server's CPU per cycle (INFO cpu).
func BenchmarkLockCycle(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{Notify: "none"})
	rdb := srv.Client(b)
	ctx := context.Background()
	for _, listen := range []bool{false, true} {
		name := "listen=no"
		if listen {
			name = "listen=yes"
		}
		b.Run(name, func(b *testing.B) {
			c := New(rdb, &Options{Owner: "bench"})
			key := "bench:" + name
			cycle := func() {
				l, err := c.Obtain(ctx, key, 10*time.Second, nil)
				if err != nil {
					b.Fatal(err)
				}
				if listen {
					l.ReleaseRequested()
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			cycle() // connections and the script cache, outside the timing
			b.ReportAllocs()
			cpu := redistest.ServerCPU(b, rdb)
			b.ResetTimer()
			for b.Loop() {
				cycle()
			}
			b.StopTimer()
			b.ReportMetric(float64(redistest.ServerCPU(b, rdb)-cpu)/float64(b.N), "server-ns/op")
		})
	}
}

package redislockscope

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// BenchmarkCycle compares an obtain + release of redislock with the same
// through this package, whose events a real lock.Emitter writes to a
// stream on the same redis-server (without keyspace notifications). Each
// caller has a key of its own. Run both in one process, interleaved by
// -count (see BENCHMARKS.md).
func BenchmarkCycle(b *testing.B) {
	srv, err := redistest.New(redistest.Options{Notify: "none"})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	for _, callers := range []int{1, 8} {
		for _, lib := range []string{"redislock", "redislockscope"} {
			b.Run("callers="+strconv.Itoa(callers)+"/lib="+lib, func(b *testing.B) {
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
				defer rdb.Close()
				bare := redislock.New(rdb)
				cycle := func(ctx context.Context, key string) error {
					l, err := bare.Obtain(ctx, key, 10*time.Second, nil)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}
				if lib == "redislockscope" {
					em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: "bench:events", MaxLen: 1000})
					defer em.Close(context.Background())
					c := New(rdb, &Options{Recorder: em, Owner: "bench"})
					cycle = func(ctx context.Context, key string) error {
						l, err := c.Obtain(ctx, key, 10*time.Second, nil)
						if err != nil {
							return err
						}
						return l.Release(ctx)
					}
				}
				redistest.Cycles(b, rdb, callers, func(ctx context.Context, w int) error {
					return cycle(ctx, "bench:"+lib+":"+strconv.Itoa(w))
				})
			})
		}
	}
}

package redsyncscope

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// mutex is what the benchmark uses of redsync's Mutex and this package's.
type mutex interface {
	LockContext(context.Context) error
	UnlockContext(context.Context) (bool, error)
}

// BenchmarkCycle compares a lock + unlock of redsync with the same through
// this package, whose events a real lock.Emitter writes to a stream on the
// same redis-server (without keyspace notifications). Each caller has a key
// of its own; a mutex is made per cycle, as redsync's are not for
// concurrent use, with one try: a key of one's own is never held, and a
// round that a loaded machine makes time out fails the benchmark instead of
// adding redsync's retry delays to the figures. Run both in one process, interleaved by -count (see
// BENCHMARKS.md).
func BenchmarkCycle(b *testing.B) {
	srv, err := redistest.New(redistest.Options{Notify: "none"})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	for _, callers := range []int{1, 8} {
		for _, lib := range []string{"redsync", "redsyncscope"} {
			b.Run("callers="+strconv.Itoa(callers)+"/lib="+lib, func(b *testing.B) {
				rdb := goredislib.NewClient(&goredislib.Options{Addr: srv.Addr()})
				defer rdb.Close()
				pool := goredis.NewPool(rdb)
				bare := redsync.New(pool)
				newMutex := func(key string) mutex {
					return bare.NewMutex(key, redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
				}
				if lib == "redsyncscope" {
					em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: "bench:events", MaxLen: 1000})
					defer em.Close(context.Background())
					rs := New(&Options{Recorder: em, Owner: "bench"}, pool)
					newMutex = func(key string) mutex {
						return rs.NewMutex(key, redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
					}
				}
				redistest.Cycles(b, rdb, callers, func(ctx context.Context, w int) error {
					m := newMutex("bench:" + lib + ":" + strconv.Itoa(w))
					if err := m.LockContext(ctx); err != nil {
						return err
					}
					_, err := m.UnlockContext(ctx)
					return err
				})
			})
		}
	}
}

package lockbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

var (
	srvOnce sync.Once
	srv     *redistest.Server
	srvErr  error
)

// server returns the redis-server all libraries share, started on first use
// without keyspace notifications (they would tax every library alike).
func server(tb testing.TB) *redistest.Server {
	srvOnce.Do(func() { srv, srvErr = redistest.New(redistest.Options{Notify: "none"}) })
	if srvErr != nil {
		tb.Fatal(srvErr)
	}
	return srv
}

func TestMain(m *testing.M) {
	code := m.Run()
	if srv != nil {
		srv.Close()
	}
	os.Exit(code)
}

const (
	ttl      = 10 * time.Second
	hotKeys  = 16
	retryGap = 500 * time.Microsecond // every library waits this long between tries on a hot key
	stream   = "lockbench:events"
)

// cycler makes one obtain + release of key; retry says whether to wait for a
// held key.
type cycler interface {
	cycle(ctx context.Context, key string, retry bool) error
	close()
}

type lib struct {
	name string
	new  func(rdb *redis.Client) cycler
}

var libs = []lib{
	{"lockscope-events", newLockscope(true, 0, false)},
	{"lockscope-events-b512", newLockscope(true, 512, false)}, // the default before issue 28
	{"lockscope-events-traced", newLockscope(true, 0, true)},
	{"lockscope-events-deadline", newDeadline(newLockscope(true, 0, false))},
	{"lockscope", newLockscope(false, 0, false)},
	{"redislock", newRedislock},
	{"redsync", newRedsync},
	{"plain", newPlain},
	{"autopipe-raw", newAutopipeRaw},
}

type lockscopeCycler struct {
	c       *lock.Client
	em      *lock.Emitter
	once    *lock.ObtainOptions
	waiting *lock.ObtainOptions
}

// newLockscope is our client, with an emitter if events (batch events per
// entry; 0: the default), and with a TraceContext hook (every call in one
// trace) if traced: the cost of trace ids in every event.
func newLockscope(events bool, batch int, traced bool) func(*redis.Client) cycler {
	return func(rdb *redis.Client) cycler {
		c := &lockscopeCycler{
			once:    &lock.ObtainOptions{},
			waiting: &lock.ObtainOptions{Retry: lock.LinearBackoff(retryGap)},
		}
		opt := &lock.Options{Owner: "bench"}
		if events {
			// A real emitter writing packed batches to a stream on the same
			// server, of its own for each batch size; trimmed so a long run
			// does not fill Redis's memory.
			s, n := stream, defaultBatch
			if batch > 0 {
				s, n = stream+":"+strconv.Itoa(batch), batch
			}
			c.em = lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: s, MaxLen: int64(eventsKept / n), BatchSize: batch})
			opt.Recorder = c.em
		}
		if traced {
			opt.TraceContext = func(context.Context) (event.TraceID, event.SpanID) {
				return event.TraceID{0: 0x4b, 15: 1}, event.SpanID{0: 0x51, 7: 1}
			}
		}
		c.c = lock.New(rdb, opt)
		return c
	}
}

// Each emitter's stream keeps about eventsKept events, whatever its batch
// size: Redis's cost per event is some five times higher while a stream
// grows (every entry new memory) than once it is trimmed (BENCHMARKS.md,
// issue 28), so streams of different entry sizes must reach their trimmed
// length after as many events to be compared. defaultBatch is
// lock.EmitterOptions.BatchSize's default.
const (
	eventsKept   = 200_000
	defaultBatch = 2048
)

func (c *lockscopeCycler) cycle(ctx context.Context, key string, retry bool) error {
	opt := c.once
	if retry {
		opt = c.waiting
	}
	l, err := c.c.Obtain(ctx, key, ttl, opt)
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

func (c *lockscopeCycler) close() {
	if c.em != nil {
		c.em.Close(context.Background())
	}
}

// deadlineCycler gives every cycle a context with a deadline, as most
// callers do: with go-redis's default options (ContextTimeoutEnabled off) a
// lone caller then waits on its context through the batcher's flusher
// instead of sending its script on its own goroutine.
type deadlineCycler struct{ cycler }

func newDeadline(inner func(*redis.Client) cycler) func(*redis.Client) cycler {
	return func(rdb *redis.Client) cycler { return deadlineCycler{inner(rdb)} }
}

func (c deadlineCycler) cycle(ctx context.Context, key string, retry bool) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.cycler.cycle(ctx, key, retry)
}

type redislockCycler struct {
	c       *redislock.Client
	waiting *redislock.Options
}

func newRedislock(rdb *redis.Client) cycler {
	return &redislockCycler{c: redislock.New(rdb), waiting: &redislock.Options{RetryStrategy: redislock.LinearBackoff(retryGap)}}
}

func (c *redislockCycler) cycle(ctx context.Context, key string, retry bool) error {
	var opt *redislock.Options
	if retry {
		opt = c.waiting
	}
	l, err := c.c.Obtain(ctx, key, ttl, opt)
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

func (c *redislockCycler) close() {}

type redsyncCycler struct{ rs *redsync.Redsync }

func newRedsync(rdb *redis.Client) cycler { return &redsyncCycler{redsync.New(goredis.NewPool(rdb))} }

func (c *redsyncCycler) cycle(ctx context.Context, key string, retry bool) error {
	opts := []redsync.Option{redsync.WithExpiry(ttl), redsync.WithTries(1)}
	if retry {
		opts = []redsync.Option{redsync.WithExpiry(ttl), redsync.WithTries(1 << 30), redsync.WithRetryDelay(retryGap)}
	}
	m := c.rs.NewMutex(key, opts...)
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	if ok, err := m.UnlockContext(ctx); !ok {
		return fmt.Errorf("redsync unlock: %v", err)
	}
	return nil
}

func (c *redsyncCycler) close() {}

// plainCycler is the cycle with no library: a bare SET NX PX and a
// compare-and-delete script (EVALSHA, EVAL after NOSCRIPT), each its own
// round trip on a connection of the client's pool. The pool (10 per
// GOMAXPROCS by default, 20 here) gives every caller its own connection up to
// 16 callers; at 64 they wait for one.
type plainCycler struct {
	rdb   *redis.Client
	del   *redis.Script
	token atomic.Int64
}

func newPlain(rdb *redis.Client) cycler {
	return &plainCycler{rdb: rdb, del: redis.NewScript(delScript)}
}

func (c *plainCycler) cycle(ctx context.Context, key string, retry bool) error {
	token := strconv.FormatInt(c.token.Add(1), 36)
	if err := setNX(ctx, c.rdb, key, token, retry); err != nil {
		return err
	}
	n, err := c.del.Run(ctx, c.rdb, []string{key}, token).Int()
	if err == nil && n != 1 {
		err = errors.New("plain: not the owner at release")
	}
	return err
}

func (c *plainCycler) close() {}

// delScript deletes KEYS[1] if it holds ARGV[1]; it returns 1 if it did.
const delScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`

// setNX takes key with SET NX PX through c, waiting retryGap between tries
// if retry is set.
func setNX(ctx context.Context, c redis.Cmdable, key, token string, retry bool) error {
	for {
		ok, err := c.SetNX(ctx, key, token, ttl).Result()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if !retry {
			return errors.New("held")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryGap):
		}
	}
}

// autopipeRawCycler is the reference for the fastest cycle go-redis offers:
// its AutoPipeliner (v9.23+, one shared stream of pipelines) carrying a bare
// SET NX PX and a compare-and-delete script, no library and no events.
type autopipeRawCycler struct {
	ap    *redis.AutoPipeliner
	del   *redis.Script
	token atomic.Int64
}

func newAutopipeRaw(rdb *redis.Client) cycler {
	ap, err := rdb.AutoPipeline()
	if err != nil {
		panic(err)
	}
	return &autopipeRawCycler{ap: ap, del: redis.NewScript(delScript)}
}

func (c *autopipeRawCycler) cycle(ctx context.Context, key string, retry bool) error {
	token := strconv.FormatInt(c.token.Add(1), 36)
	if err := setNX(ctx, c.ap, key, token, retry); err != nil {
		return err
	}
	n, err := c.del.EvalSha(ctx, c.ap, []string{key}, token).Int()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		n, err = c.del.Eval(ctx, c.ap, []string{key}, token).Int()
	}
	if err == nil && n != 1 {
		err = errors.New("autopipe-raw: not the owner at release")
	}
	return err
}

func (c *autopipeRawCycler) close() { c.ap.Close() }

// BenchmarkCycle measures obtain + release at 1, 8, 16 and 64 concurrent
// callers, each caller on its own key (unique) or all on 16 hot keys
// (hot16, waiting with a 500µs linear retry). One op is one cycle.
func BenchmarkCycle(b *testing.B) {
	for _, keys := range []string{"unique", "hot16"} {
		for _, callers := range []int{1, 8, 16, 64} {
			for _, l := range libs {
				name := fmt.Sprintf("keys=%s/callers=%d/lib=%s", keys, callers, l.name)
				b.Run(name, func(b *testing.B) { benchCycle(b, l, keys == "hot16", callers) })
			}
		}
	}
}

func benchCycle(b *testing.B, l lib, hot bool, callers int) {
	s := server(b)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rdb.Close()
	c := l.new(rdb)
	closeCycler := sync.OnceFunc(c.close)
	defer closeCycler()
	ctx := context.Background()
	prefix := "bench:" + l.name + ":"
	keys := make([]string, callers)
	for w := range keys {
		if hot {
			keys[w] = prefix + "hot:" + strconv.Itoa(w%hotKeys)
		} else {
			keys[w] = prefix + "unique:" + strconv.Itoa(w)
		}
	}
	// Warm up the connections and the script cache outside the timing.
	for _, k := range keys[:min(len(keys), hotKeys)] {
		if err := c.cycle(ctx, k, hot); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	cpu0, self0 := redistest.ServerCPU(b, rdb), redistest.SelfCPU(b)
	xadd0, _ := redistest.CommandTime(b, rdb, "xadd")
	b.ResetTimer()
	start := time.Now()
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := c.cycle(ctx, keys[w], hot); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatalf("cycle: %v", *err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cycles/s")
	// Redis's own CPU time per cycle does not depend on what else runs on
	// the machine, unlike the wall-clock figures.
	closeCycler() // the emitter's last batch: every cycle's events are counted
	server := redistest.ServerCPU(b, rdb) - cpu0
	self := redistest.SelfCPU(b) - self0
	xadd, _ := redistest.CommandTime(b, rdb, "xadd")
	// Redis's time in XADD per cycle: what the events cost Redis, from
	// INFO commandstats (the command's own run time).
	b.ReportMetric(float64((xadd-xadd0).Nanoseconds())/float64(b.N), "xadd-ns/op")
	b.ReportMetric(float64(server.Nanoseconds())/float64(b.N), "server-ns/op")
	// The client side: this process's CPU time (the library, go-redis, the
	// emitter and the benchmark loop), and the sum issue 16 compares.
	b.ReportMetric(float64(self.Nanoseconds())/float64(b.N), "client-ns/op")
	b.ReportMetric(float64((server+self).Nanoseconds())/float64(b.N), "cpu-ns/op")
	// How many cores the client and Redis kept busy together: below the
	// machine's count, callers wait on something other than the CPU.
	b.ReportMetric((server+self).Seconds()/elapsed.Seconds(), "cores")
}

// TestCyclesLock checks each adapter really takes and frees the lock, so the
// benchmark compares working code.
func TestCyclesLock(t *testing.T) {
	s := server(t)
	rdb := s.Client(t)
	ctx := context.Background()
	for _, l := range libs {
		c := l.new(rdb)
		key := "check:" + l.name
		holder := lock.New(rdb, &lock.Options{Owner: "holder"})
		held, err := holder.Obtain(ctx, key, time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.cycle(ctx, key, false); err == nil {
			t.Errorf("%s: cycle on a held key = nil, want an error", l.name)
		}
		// Released once the waiting cycle has tried: it waits, whatever the
		// library, and gets the key at a retry.
		tries := &redistest.Commands{Key: key}
		rdb.AddHook(tries)
		go func() {
			redistest.Poll(t.Context(), func() bool { return tries.N() > 0 })
			held.Release(ctx)
		}()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := c.cycle(wctx, key, true); err != nil {
			t.Errorf("%s: waiting cycle = %v, want nil once the holder releases", l.name, err)
		}
		cancel()
		if n := rdb.Exists(ctx, key).Val(); n != 0 {
			t.Errorf("%s: key left after the cycle", l.name)
		}
		c.close()
	}
}

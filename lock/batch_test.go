package lock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// flightHook counts the round trips a client makes: single commands and
// pipelines, and how many are on the wire at once.
type flightHook struct {
	mu       sync.Mutex
	cur, max int

	single, pipes, piped atomic.Int64
}

func (h *flightHook) enter() {
	h.mu.Lock()
	h.cur++
	h.max = max(h.max, h.cur)
	h.mu.Unlock()
}

func (h *flightHook) leave() {
	h.mu.Lock()
	h.cur--
	h.mu.Unlock()
}

func (h *flightHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *flightHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if setUp(cmd) {
			return next(ctx, cmd)
		}
		h.enter()
		defer h.leave()
		h.single.Add(1)
		return next(ctx, cmd)
	}
}

func (h *flightHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if setUp(cmds[0]) {
			return next(ctx, cmds)
		}
		h.enter()
		defer h.leave()
		h.pipes.Add(1)
		h.piped.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// setUp reports whether cmd is part of a new connection's set-up, which
// go-redis sends within the round trip that needed the connection.
func setUp(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

// reset zeroes the counts and returns the peak of round trips in flight
// since the last reset.
func (h *flightHook) reset() (peak int) {
	h.mu.Lock()
	peak, h.max = h.max, h.cur
	h.mu.Unlock()
	h.single.Store(0)
	h.pipes.Store(0)
	h.piped.Store(0)
	return peak
}

// cycles runs callers goroutines, each taking, checking and releasing its
// own key n times, and fails t on any wrong answer: the lease must be the
// one Redis holds for that key (a reply delivered to the wrong caller would
// show another key's holder or another lease).
func cycles(t *testing.T, c *Client, p string, callers, n int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, owner := p+strconv.Itoa(w), "w"+strconv.Itoa(w)
			for range n {
				l, err := c.Obtain(ctx, key, time.Minute, &ObtainOptions{Owner: owner})
				if err != nil {
					errs <- fmt.Errorf("Obtain(%q) = %v, want a lease", key, err)
					return
				}
				h, err := c.Inspect(ctx, key)
				if err != nil || h.Key != key || h.Owner != owner || h.Lease != l.ID() {
					errs <- fmt.Errorf("Inspect(%q) = %+v, %v; want owner %s, lease %s", key, h, err, owner, l.ID())
					return
				}
				if err := l.Release(ctx); err != nil {
					errs <- fmt.Errorf("Release(%q) = %v, want nil", key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestDirectAndBatched: a lone caller sends each command on its own as a
// single round trip; many callers share pipelines, never more in flight at
// once than the tuner allows; and a lone caller after them is back to
// single round trips. Every reply reaches its own caller throughout.
func TestDirectAndBatched(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	hook := &flightHook{}
	rdb.AddHook(hook)
	c := New(rdb, &Options{Owner: "flight"})
	const limit = 3
	c.batch.tune, c.batch.limit = newTuner(limit), limit // the tuner may go no higher
	p := redistest.KeyPrefix(t)
	cycles(t, c, p+"warm-up:", 1, 1) // scripts loaded, a connection open
	hook.reset()

	cycles(t, c, p+"alone:", 1, 50)
	if s, pipes := hook.single.Load(), hook.pipes.Load(); s != 150 || pipes != 0 {
		t.Errorf("lone caller, 50 cycles: %d single round trips and %d pipelines, want 150 and 0", s, pipes)
	}
	if peak := hook.reset(); peak != 1 {
		t.Errorf("lone caller: %d round trips in flight at once, want 1", peak)
	}

	cycles(t, c, p+"crowd:", 32, 200)
	pipes, piped, single := hook.pipes.Load(), hook.piped.Load(), hook.single.Load()
	if peak := hook.reset(); peak > limit {
		t.Errorf("32 callers: %d round trips in flight at once, want at most %d", peak, limit)
	}
	if pipes == 0 || piped < 2*pipes {
		t.Errorf("32 callers: %d pipelines carrying %d commands, want pipelines of 2 or more on average", pipes, piped)
	}
	if total := piped + single; total < 32*200*3 {
		t.Errorf("32 callers: %d commands sent, want at least %d", total, 32*200*3)
	}
	redistest.WaitFor(t, 15*time.Second, "the crowd's flushers done", func() bool {
		c.batch.mu.Lock()
		defer c.batch.mu.Unlock()
		return c.batch.inflight == 0
	})
	c.batch.mu.Lock() // a flusher may still have been setting it
	t.Logf("32 callers: %d single round trips, %d pipelines carrying %d commands; limit %d", single, pipes, piped, c.batch.limit)
	c.batch.mu.Unlock()
	hook.reset()
	cycles(t, c, p+"alone-again:", 1, 50)
	if s, pipes := hook.single.Load(), hook.pipes.Load(); s != 150 || pipes != 0 {
		t.Errorf("lone caller after the crowd: %d single round trips and %d pipelines, want 150 and 0", s, pipes)
	}
	c.batch.mu.Lock()
	defer c.batch.mu.Unlock()
	if c.batch.inflight != 0 || len(c.batch.queue) != 0 {
		t.Errorf("at rest: %d round trips in flight, %d calls queued; want 0 and 0", c.batch.inflight, len(c.batch.queue))
	}
}

// TestTunedLimitIsUsed: whatever limit the tuner sets is what the batcher
// keeps in flight, on both paths: with 8 callers and room for 8 round
// trips, the callers send on their own (8 at once at the peak), and with
// the limit pinned at 1 they share one pipeline at a time.
func TestTunedLimitIsUsed(t *testing.T) {
	for _, limit := range []int{1, 8} {
		t.Run("limit="+strconv.Itoa(limit), func(t *testing.T) {
			rdb := redistest.Shared(t).Client(t)
			hook := &flightHook{}
			rdb.AddHook(hook)
			c := New(rdb, &Options{Owner: "pinned"})
			c.batch.tune = &tuner{limit: limit, base: limit, max: limit, rest: 1 << 30}
			c.batch.limit = limit
			// Slow every command a little so that callers overlap.
			slow := newScript(`local t = redis.call("time") repeat until (redis.call("time")[2] - t[2]) % 1000000 >= 300 return 1`)
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 20 {
						if n, err := c.batch.run(context.Background(), slow, []string{"slow" + strconv.Itoa(w)}).Int(); n != 1 || err != nil {
							t.Errorf("slow script = %d, %v; want 1", n, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			peak := hook.reset()
			if peak > limit || limit > 1 && peak < 2 {
				t.Errorf("limit %d, 8 callers: %d round trips in flight at once, want %d at most (and several when it allows)", limit, peak, limit)
			}
		})
	}
}

// TestResultsUnderCancellation: callers whose contexts end at random
// points (before sending, while queued, while their command is on the wire)
// never receive another caller's result, every lease they do get is the
// one Redis holds, and every obtain that ran after its caller left is
// released. Both ways a caller can wait: on the flusher (the client does
// not enforce deadlines) and sending on its own (it does).
func TestResultsUnderCancellation(t *testing.T) {
	for _, enforce := range []bool{false, true} {
		t.Run("ContextTimeoutEnabled="+strconv.FormatBool(enforce), func(t *testing.T) {
			s := redistest.Shared(t)
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: enforce})
			t.Cleanup(func() { rdb.Close() })
			c := New(rdb, &Options{Owner: "cancel"})
			p := redistest.KeyPrefix(t)

			const callers, n = 24, 60
			var wg sync.WaitGroup
			var got, gaveUp atomic.Int64
			for w := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					key, owner := p+strconv.Itoa(w), "w"+strconv.Itoa(w)
					for i := range n {
						// 50 µs to 20 ms: calls end before their round trip,
						// on the wire, or after it. Every fourth has 10 s,
						// so that some finish however busy the host is.
						d := time.Duration(50*math.Pow(400, rng.Float64())) * time.Microsecond
						if i%4 == 3 {
							d = 10 * time.Second
						}
						ctx, cancel := context.WithTimeout(context.Background(), d)
						l, err := c.Obtain(ctx, key, time.Minute, &ObtainOptions{Owner: owner})
						cancel()
						var noe *NotObtainedError
						switch {
						case errors.Is(err, context.DeadlineExceeded):
							gaveUp.Add(1)
							continue
						case errors.As(err, &noe) && noe.Reason == event.ReasonHeld:
							// An earlier obtain of this caller ran after it
							// left and was not released yet when this one
							// came (nil: it was by the time of the inspect):
							// the holder must be this caller, nobody else
							// uses the key.
							if noe.Holder != nil && noe.Holder.Owner != owner {
								t.Errorf("Obtain(%q) = %v, want it held by %s if at all", key, err, owner)
								return
							}
							continue
						case err != nil:
							t.Errorf("Obtain(%q) = %v, want a lease or a deadline error", key, err)
							return
						}
						got.Add(1)
						h, err := c.Inspect(context.Background(), key)
						if err != nil || h.Owner != owner || h.Lease != l.ID() {
							t.Errorf("Inspect(%q) = %+v, %v; want owner %s, lease %s", key, h, err, owner, l.ID())
							return
						}
						if err := l.Release(context.Background()); err != nil {
							t.Errorf("Release(%q) = %v, want nil", key, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if got.Load() == 0 || gaveUp.Load() == 0 {
				t.Fatalf("%d obtains succeeded and %d gave up, want some of each (the test proves nothing otherwise)", got.Load(), gaveUp.Load())
			}
			t.Logf("%d obtained, %d gave up", got.Load(), gaveUp.Load())
			redistest.WaitFor(t, 15*time.Second, "obtains whose callers left released", func() bool {
				return len(rdb.Keys(context.Background(), p+"*").Val()) == 0
			})
		})
	}
}

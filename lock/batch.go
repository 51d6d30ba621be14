package lock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher shares round trips between concurrent callers. A caller that finds
// no round trip in flight, and whose deadline the client enforces (or that
// has none), runs its script directly on its own goroutine (a lone caller
// pays nothing extra). Callers that arrive while one is in
// flight queue up, and a flusher sends everything queued as one pipeline
// when the wire is free again, so 64 callers cost a few round trips instead
// of 64. The pipeline is the client's own, so single, Sentinel and Cluster
// clients all work (a cluster pipeline splits by node).
//
// Queued callers wait on their own context: one whose context ends leaves
// its result behind, and an obtain that succeeded after its caller left is
// released (see late).
type batcher struct {
	rdb redis.UniversalClient
	// direct is whether a lone caller may run its script on its own
	// goroutine even when its context can end: only when the client itself
	// stops a call at the context's deadline (ContextTimeoutEnabled).
	// Otherwise go-redis bounds a call on the wire by its ReadTimeout
	// (3 s by default), not by the context, so such callers go through the
	// flusher and wait on their context instead.
	direct bool

	mu       sync.Mutex
	inflight int     // round trips in flight: a direct run or the flusher
	queue    []*call // waiting for the next pipeline
	spare    []*call // the previous batch's slice, reused
	expect   int     // callers of the last batch, likely to come back
	holding  bool    // the flusher waits for them
	arrived  chan struct{}
	skip     int // batches to send without waiting, after a wait in vain
}

// maxInFlight is the number of round trips in flight at once. One keeps the
// batches deep; two (on two connections) measured no faster on two cores,
// where Redis and the Go process share the CPUs.
const maxInFlight = 1

// holdMax bounds the flusher's wait for returning callers (see flush);
// holdSkip is how many batches go out without waiting after a wait in vain.
const (
	holdMax  = 50 * time.Microsecond
	holdSkip = 32
)

const (
	callWaiting int32 = iota
	callDone
	callAbandoned
)

type call struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	state  atomic.Int32
	done   chan struct{} // capacity 1: the flusher never blocks on it
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func newBatcher(rdb redis.UniversalClient) *batcher {
	return &batcher{rdb: rdb, arrived: make(chan struct{}, 1), direct: contextTimeouts(rdb)}
}

// contextTimeouts reports whether rdb stops calls at their context's deadline.
func contextTimeouts(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// run runs script and returns its command. With the context done before the
// reply arrives it returns a command carrying the context's error; the script
// may still run in Redis.
func (b *batcher) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	b.mu.Lock()
	// A context that never ends cannot be honoured any better by waiting
	// on it, so such a lone caller saves the hand-off to the flusher.
	if b.inflight == 0 && (b.direct || ctx.Done() == nil) {
		b.inflight++
		b.mu.Unlock()
		cmd := script.Run(ctx, b.rdb, keys, args...)
		b.mu.Lock()
		if len(b.queue) > 0 {
			go b.flush() // takes over our slot
		} else {
			b.inflight--
		}
		b.mu.Unlock()
		return cmd
	}
	c := callPool.Get().(*call)
	c.script, c.keys, c.args = script, keys, args
	c.state.Store(callWaiting)
	b.queue = append(b.queue, c)
	if b.holding && len(b.queue) >= b.expect {
		b.holding = false
		select {
		case b.arrived <- struct{}{}:
		default:
		}
	}
	if b.inflight < maxInFlight {
		b.inflight++
		go b.flush()
	}
	b.mu.Unlock()

	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callAbandoned) {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(context.Cause(ctx))
			return cmd // c now belongs to the flusher
		}
		<-c.done
	}
	cmd := c.cmd
	*c = call{done: c.done}
	callPool.Put(c)
	return cmd
}

func (b *batcher) flush() {
	var hold *time.Timer
	b.mu.Lock()
	batch := b.spare
	b.spare = nil
	for len(b.queue) > 0 {
		if b.skip > 0 {
			b.skip--
		} else if len(b.queue) < b.expect {
			// In a busy closed loop the callers of the last batch come
			// straight back with their next command: wait a moment for
			// them, so that the next round trip carries them all. Callers
			// that go off to do work do not come back that fast; a wait in
			// vain turns the waiting off for a while.
			b.holding = true
			b.mu.Unlock()
			if hold == nil {
				hold = time.NewTimer(holdMax)
			} else {
				hold.Reset(holdMax)
			}
			arrived := false
			select {
			case <-b.arrived:
				arrived = true
			case <-hold.C:
			}
			b.mu.Lock()
			b.holding = false
			select {
			case <-b.arrived:
				arrived = true
			default:
			}
			if !arrived {
				b.skip = holdSkip
			}
		}
		batch, b.queue = b.queue, batch[:0]
		b.expect = len(batch)
		b.mu.Unlock()

		b.exec(batch)
		for i, c := range batch {
			batch[i] = nil
			if c.state.CompareAndSwap(callWaiting, callDone) {
				c.done <- struct{}{}
			} else {
				late(b.rdb, c)
			}
		}
		b.mu.Lock()
	}
	b.inflight--
	b.expect = 0
	if b.spare == nil {
		b.spare = batch[:0]
	}
	b.mu.Unlock()
	if hold != nil {
		hold.Stop()
	}
}

// exec sends a batch as one pipeline; scripts the server does not know yet
// (NOSCRIPT after a restart or SCRIPT FLUSH) go again with EVAL.
func (b *batcher) exec(batch []*call) {
	ctx := context.Background()
	pipe := b.rdb.Pipeline()
	for _, c := range batch {
		c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors stay on each command
	var again redis.Pipeliner
	for _, c := range batch {
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			if again == nil {
				again = b.rdb.Pipeline()
			}
			c.cmd = c.script.Eval(ctx, again, c.keys, c.args...)
		}
	}
	if again != nil {
		_, _ = again.Exec(ctx)
	}
}

// late handles the result of a call whose caller gave up waiting: an obtain
// that succeeded after its caller left is released so the key is not held by
// nobody until its TTL.
func late(rdb redis.UniversalClient, c *call) {
	if c.script != obtainScript || c.cmd.Err() != nil {
		return
	}
	if _, ok := c.cmd.Val().(int64); ok {
		go releaseOrphan(rdb, c.keys[0], c.args[0])
	}
}

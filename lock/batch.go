package lock

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher shares round trips between concurrent callers, keeping at most
// limit round trips in flight; the tuner (tune.go) sets the limit from what
// it measures on this client. A caller that finds a round trip free and
// nobody queued, and whose deadline the client enforces (or that has none),
// sends its command directly on its own goroutine: a lone caller, or a few,
// pay nothing extra and use a connection each, as plain go-redis calls do.
// Callers that find every round trip taken queue up, and a flusher sends
// everything queued as one pipeline when a round trip is free again, so 64
// callers cost a few round trips instead of 64. Several flushers run at once
// when the limit is above one, each on its own connection. The pipeline is
// the client's own, so single, Sentinel and Cluster clients all work (a
// cluster pipeline splits by node).
//
// Why a measured limit rather than one pipeline in flight, as before issue
// 28: with one, 8 callers queued behind each round trip while a core idled
// (0.78 cores busy, 0.69x redislock on one host, 1.64x on another with the
// same code). Why not go-redis's own AutoPipeliner (v9.23, experimental),
// as the transport: measured in one run against this batcher, its async
// face (Submit + WaitContext, which keeps deadlines) carrying our commands
// was 0.57x at 64 callers and 0.39x with 64 callers on 16 hot keys, 1.17x
// at 8, and a lone caller with a deadline fell to 0.7 k cycles/s; its
// blocking face waits without the context (BENCHMARKS.md, issue 16).
//
// Queued callers wait on their own context: one whose context ends leaves
// its result behind, and an obtain that succeeded after its caller left is
// released (see late).
type batcher struct {
	rdb redis.UniversalClient
	// direct is whether a lone caller may send its command on its own
	// goroutine even when its context can end: only when the client itself
	// stops a call at the context's deadline (ContextTimeoutEnabled).
	// Otherwise go-redis bounds a call on the wire by its ReadTimeout
	// (3 s by default), not by the context, so such callers go through the
	// flusher and wait on their context instead.
	direct bool

	// epoch starts clock: the tuner's latencies read the monotonic clock
	// only (time.Since), half the cost of time.Now where the clock source
	// has no fast path (some 140 against 260 ns on kvm-clock), and a direct
	// send reads it twice per command.
	epoch time.Time

	mu       sync.Mutex
	inflight int // round trips in flight: direct sends and pipelines
	limit    int // how many may be in flight (tune decides)
	tune     *tuner
	queue    []*call   // waiting for the next pipeline
	spare    [][]*call // finished batches' slices, reused

	// noSetGet: the server refused SET ... NX GET (Redis before 7.0), so
	// obtains without fencing run obtain.lua instead.
	noSetGet atomic.Bool
}

// holdMax bounds a flusher's wait for returning callers (see flush).
const holdMax = 50 * time.Microsecond

const (
	callWaiting int32 = iota
	callDone
	callAbandoned
)

// call is one caller's request: cmd, an EVALSHA of script (falling back to
// EVAL on NOSCRIPT), or, with script nil, a plain command (the obtain by
// SET, see setObtain).
type call struct {
	cmd    *redis.Cmd
	script *luaScript
	obtain *Lease        // an obtain: the hold it takes, which late releases if the caller left
	get    bool          // the SET obtain carries GET
	start  time.Duration // when the caller queued it (batcher.clock)
	state  atomic.Int32
	done   chan struct{} // capacity 1: the flusher never blocks on it
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func newBatcher(rdb redis.UniversalClient) *batcher {
	t := newTuner(poolSize(rdb))
	return &batcher{rdb: rdb, direct: contextTimeouts(rdb), tune: t, limit: t.limit, epoch: time.Now()}
}

// clock returns the monotonic time since b was made.
func (b *batcher) clock() time.Duration { return time.Since(b.epoch) }

// poolSize returns how many connections rdb keeps per node: the most round
// trips in flight worth having, since a direct send beyond it would wait
// for a connection.
func poolSize(rdb redis.UniversalClient) int {
	n := 0
	switch c := rdb.(type) {
	case *redis.Client:
		n = c.Options().PoolSize
	case *redis.ClusterClient:
		n = c.Options().PoolSize
	}
	if n <= 0 {
		n = 10 * runtime.GOMAXPROCS(0) // go-redis's default
	}
	return n
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
func (b *batcher) run(ctx context.Context, script *luaScript, keys []string, args ...any) *redis.Cmd {
	return b.runCmd(ctx, script, script.evalSha(keys, args), nil)
}

// runCmd sends cmd, the EVALSHA of script (with script nil, any command),
// and returns the command that carries the reply: cmd, or the EVAL that
// replaced it after a NOSCRIPT. With the context done before the reply
// arrives it returns a command carrying the context's error. obtain, if not
// nil, is the hold that cmd takes: if ctx ends first and the command takes
// the lock all the same, late releases it.
func (b *batcher) runCmd(ctx context.Context, script *luaScript, cmd *redis.Cmd, obtain *Lease) *redis.Cmd {
	c := callPool.Get().(*call)
	c.script, c.cmd, c.obtain = script, cmd, obtain
	if !b.exchange(ctx, c) {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(context.Cause(ctx))
		return cmd // c now belongs to the flusher
	}
	cmd = c.cmd
	*c = call{done: c.done}
	callPool.Put(c)
	return cmd
}

// setObtain takes l's key with a native "SET key value NX PX ttl": a command
// costs Redis a fraction of an EVALSHA (see BENCHMARKS.md, issue 16). With
// get it appends GET, which returns the value holding the key when it is
// refused. A first attempt goes without: its success then replies OK,
// where GET's nil would cost go-redis an error path (a retry check and
// some twenty allocations) on every uncontended obtain; a refused first attempt
// reads the holder with an inspect (see Client.obtain). Retries, which
// mostly fail, go with GET. A reply that is our own value is a request
// go-redis retried after its first run succeeded: obtained. SET ... NX GET
// needs Redis 7.0; an older server's syntax error comes back as
// errSetGetUnsupported.
//
// The command's arguments are l.args, pointers to l's fields, so that
// building it costs one allocation, the command (issue 28).
func (b *batcher) setObtain(ctx context.Context, l *Lease, get bool) (ok bool, holder string, err error) {
	args := l.args[:6]
	if get {
		args = l.args[:7]
	}
	c := callPool.Get().(*call)
	c.cmd, c.obtain, c.get = redis.NewCmd(ctx, args...), l, get
	if !b.exchange(ctx, c) {
		return false, "", context.Cause(ctx)
	}
	ok, holder, err = setObtainReply(c.cmd, l.head, get)
	*c = call{done: c.done}
	callPool.Put(c)
	return ok, holder, err
}

// setObtainReply reads the reply of setObtain's command: without get, OK
// (obtained) or nil (refused, holder unknown); with get, nil (obtained) or
// the holder's value.
func setObtainReply(cmd *redis.Cmd, head string, get bool) (ok bool, holder string, err error) {
	v, err := cmd.Text()
	switch {
	case errors.Is(err, redis.Nil):
		return get, "", nil
	case err != nil:
		if re := redis.Error(nil); errors.As(err, &re) && strings.Contains(re.Error(), "syntax error") {
			return false, "", errSetGetUnsupported
		}
		return false, "", err
	case !get:
		return true, "", nil // OK
	}
	return strings.HasPrefix(v, head), v, nil
}

var errSetGetUnsupported = errors.New("lock: this Redis does not support SET NX GET (needs 7.0)")

// exchange sends c and waits for its replies. It returns false if ctx
// ended first: c then belongs to the flusher, which hands a late obtain to
// late.
func (b *batcher) exchange(ctx context.Context, c *call) bool {
	c.start = b.clock()
	b.mu.Lock()
	// While a round trip is free and nobody queues, a caller sends on its
	// own goroutine: with few callers each call is a plain round trip on
	// its own connection, with no hand-off. Only a caller whose deadline
	// the client enforces may (see direct); a context that never ends
	// cannot be honoured any better by waiting on it.
	if len(b.queue) == 0 && b.inflight < b.limit && (b.direct || ctx.Done() == nil) {
		b.inflight++
		b.mu.Unlock()
		b.send(ctx, c)
		now := b.clock()
		b.mu.Lock()
		b.limit = b.tune.observe(b.epoch.Add(now), 1, now-c.start)
		b.finish()
		b.mu.Unlock()
		return true
	}
	c.state.Store(callWaiting)
	b.queue = append(b.queue, c)
	if b.inflight < b.limit {
		b.inflight++
		go b.flush()
	}
	b.mu.Unlock()

	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callAbandoned) {
			return false
		}
		<-c.done
	}
	return true
}

// finish ends a direct round trip: its slot goes to a new flusher if
// callers queued meanwhile, unless more round trips than the limit are in
// flight (the limit went down); those others then carry the queue. The
// caller holds b.mu.
func (b *batcher) finish() {
	if len(b.queue) > 0 && b.inflight <= b.limit {
		go b.flush()
		return
	}
	b.inflight--
}

// send runs one call on the caller's goroutine.
func (b *batcher) send(ctx context.Context, c *call) {
	_ = b.rdb.Process(ctx, c.cmd) // the error stays on the command
	if c.script != nil && noScript(c.cmd.Err()) {
		c.cmd = c.script.eval(c.cmd)
		_ = b.rdb.Process(ctx, c.cmd)
	}
}

// flush sends what callers queued, as one pipeline per round trip, until
// the queue is empty; several flushers run at once when the limit allows,
// each on its own connection.
func (b *batcher) flush() {
	b.mu.Lock()
	var batch []*call
	if n := len(b.spare); n > 0 {
		batch, b.spare = b.spare[n-1], b.spare[:n-1]
	}
	expect := 0 // callers of this flusher's last batch, likely to come back
	for {
		// In a busy closed loop the callers of the last batch come
		// straight back with their next command: let them run (they were
		// just woken, mostly on this thread) and wait while the queue
		// grows, so that the next round trip carries them all instead of
		// the first few. Callers that go off to do work do not come back
		// that fast: two yields without a new arrival end the wait. A
		// timed wait (50 µs, then 32 batches without waiting after a wait
		// in vain) measured 0.83x at 8 callers and 0.73x with 64 callers
		// on 16 hot keys (BENCHMARKS.md, issue 16). Only the callers that
		// find every round trip taken queue (this flusher's counts), so
		// the wait captures them only while the limit binds; and not
		// after a batch of one, whose caller then sends on its own.
		start := time.Duration(-1) // read only if there is a wait
		for idle := 0; expect > 1 && len(b.queue) < expect && idle < 2; {
			if start < 0 {
				start = b.clock()
			} else if b.clock()-start >= holdMax {
				break
			}
			n := len(b.queue)
			b.mu.Unlock()
			runtime.Gosched()
			b.mu.Lock()
			if len(b.queue) == n {
				idle++
			} else {
				idle = 0
			}
		}
		if len(b.queue) == 0 {
			break
		}
		batch, b.queue = b.queue, batch[:0]
		expect = len(batch)
		b.mu.Unlock()

		b.exec(batch)
		now := b.clock()
		var lat time.Duration
		for _, c := range batch {
			lat += now - c.start // before the caller may reuse c
		}
		for i, c := range batch {
			batch[i] = nil
			if c.state.CompareAndSwap(callWaiting, callDone) {
				c.done <- struct{}{}
			} else {
				late(b.rdb, c)
			}
		}
		b.mu.Lock()
		b.limit = b.tune.observe(b.epoch.Add(now), len(batch), lat)
		if b.inflight > b.limit {
			break // the limit went down: the others carry the queue
		}
	}
	b.inflight--
	b.spare = append(b.spare, batch[:0])
	b.mu.Unlock()
}

// exec sends a batch as one pipeline; scripts the server does not know yet
// (NOSCRIPT after a restart or SCRIPT FLUSH) go again with EVAL.
func (b *batcher) exec(batch []*call) {
	ctx := context.Background()
	pipe := b.rdb.Pipeline()
	for _, c := range batch {
		_ = pipe.Process(ctx, c.cmd)
	}
	_, _ = pipe.Exec(ctx) // errors stay on each command
	var again redis.Pipeliner
	for _, c := range batch {
		if c.script != nil && noScript(c.cmd.Err()) {
			if again == nil {
				again = b.rdb.Pipeline()
			}
			c.cmd = c.script.eval(c.cmd)
			_ = again.Process(ctx, c.cmd)
		}
	}
	if again != nil {
		_, _ = again.Exec(ctx)
	}
}

// late handles the result of a call whose caller gave up waiting: an obtain
// that succeeded after its caller left is released so the key is not held by
// nobody until its TTL. Other calls leave nothing to undo.
func late(rdb redis.UniversalClient, c *call) {
	l := c.obtain
	if l == nil {
		return
	}
	var obtained bool
	if c.script == nil {
		obtained, _, _ = setObtainReply(c.cmd, l.head, c.get)
	} else {
		_, obtained = c.cmd.Val().(int64)
		obtained = obtained && c.cmd.Err() == nil
	}
	// A reply lost on the way (a timeout, a broken connection) says
	// nothing of whether the obtain ran: release it all the same. The
	// release deletes only a value with this call's head, so it is safe
	// if the obtain never ran.
	var re redis.Error
	unsure := false
	if err := c.cmd.Err(); err != nil && !errors.As(err, &re) {
		unsure = true
	}
	if obtained || unsure {
		go releaseOrphan(rdb, l.key, l.headArg, time.Duration(l.ttlMs)*time.Millisecond, unsure)
	}
}

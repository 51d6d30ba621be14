// Package redsyncscope instruments github.com/go-redsync/redsync/v4 for
// lockscope: a Redsync and a Mutex with redsync's calls and errors whose
// locks report every step (waiting, acquired, failed, released, renewed,
// lost) through a lock.Recorder, usually a *lock.Emitter. A team keeps
// redsync and gains what a failed SET NX never shows in Redis: who waits,
// for how long, who gives up, and deadlocks between callers.
//
//	em := lock.NewEmitter(rdb, nil)
//	defer em.Close(ctx)
//	rs := redsyncscope.New(&redsyncscope.Options{Recorder: em, Owner: "billing"}, goredis.NewPool(rdb))
//	m := rs.NewMutex("invoice:42", redsync.WithExpiry(10*time.Second))
//	if err := m.LockContext(ctx); err != nil { ... }
//	defer m.UnlockContext(ctx)
//
// The pools are wrapped to see each attempt: the first round of a
// LockContext that the lock's holders refused records a waiting event
// (naming the holder, read with one GET) before redsync sleeps and retries.
// redsync does not tell how many tries a Mutex has: with WithTries(1), use
// TryLock, or LockContext records a waiting event that its failed event
// ends at once. A LockContext that runs out of tries after retrying is
// recorded as failed with reason timeout (it gave up waiting), a single
// refused try as held.
//
// The lock's value is lockscope's (lock.Value: a secret token, the lease
// id, the lock call's start time and the owner) instead of redsync's random
// one, unless WithGenValueFunc or WithValue sets one.
package redsyncscope

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
)

// Options configures a Redsync. A nil *Options records nothing.
type Options struct {
	// Recorder receives the events; nil means none (the bare library).
	Recorder lock.Recorder
	// Owner names this caller on the dashboard; "" means lock.DefaultOwner().
	Owner string
}

// Redsync is redsync.Redsync with events.
type Redsync struct {
	rs    *redsync.Redsync
	rec   lock.Recorder
	owner string
}

// New returns a Redsync over pools, as redsync.New.
func New(opt *Options, pools ...redis.Pool) *Redsync {
	r := &Redsync{}
	if opt != nil {
		r.rec, r.owner = opt.Recorder, opt.Owner
	}
	if r.owner == "" {
		r.owner = lock.DefaultOwner()
	}
	if r.rec == nil {
		r.rs = redsync.New(pools...)
		return r
	}
	wrapped := make([]redis.Pool, len(pools))
	for i, p := range pools {
		wrapped[i] = pool{p}
	}
	r.rs = redsync.New(wrapped...)
	return r
}

// NewMutex returns a mutex named name (the Redis key), as redsync's.
func (r *Redsync) NewMutex(name string, options ...redsync.Option) *Mutex {
	m := &Mutex{r: r, name: name}
	if r.rec != nil {
		// First, so that the caller's WithGenValueFunc or WithValue wins.
		options = append([]redsync.Option{redsync.WithGenValueFunc(m.genValue)}, options...)
	}
	m.m = r.rs.NewMutex(name, options...)
	return m
}

// Mutex is redsync.Mutex with events. Like redsync's, it is not safe for
// concurrent use.
type Mutex struct {
	m    *redsync.Mutex
	r    *Redsync
	name string

	pending struct{ value, lease string } // the last value genValue made
	lease   string                        // the current hold's
	since   time.Time
	ttl     time.Duration // the expiry redsync last set

	mu   sync.Mutex
	held bool
}

func (m *Mutex) genValue() (string, error) {
	m.pending.value, m.pending.lease = lock.NewValue(m.r.owner, time.Now())
	return m.pending.value, nil
}

// Name returns the mutex name (the Redis key).
func (m *Mutex) Name() string { return m.m.Name() }

// Value returns the current value, as redsync's.
func (m *Mutex) Value() string { return m.m.Value() }

// Until returns the time of validity of the acquired lock, as redsync's.
func (m *Mutex) Until() time.Time { return m.m.Until() }

// ID returns the public lease id of the current hold ("" before the first
// lock, or without a Recorder).
func (m *Mutex) ID() string { return m.lease }

// Unwrap returns the redsync.Mutex (calls on it record nothing).
func (m *Mutex) Unwrap() *redsync.Mutex { return m.m }

// TryLock attempts to lock m once, as redsync's.
func (m *Mutex) TryLock() error { return m.TryLockContext(context.Background()) }

// TryLockContext attempts to lock m once, as redsync's.
func (m *Mutex) TryLockContext(ctx context.Context) error { return m.lock(ctx, false) }

// Lock locks m, as redsync's.
func (m *Mutex) Lock() error { return m.LockContext(context.Background()) }

// LockContext locks m, retrying as redsync does, and records the wait.
func (m *Mutex) LockContext(ctx context.Context) error { return m.lock(ctx, true) }

func (m *Mutex) lock(ctx context.Context, retry bool) error {
	if m.r.rec == nil {
		if retry {
			return m.m.LockContext(ctx)
		}
		return m.m.TryLockContext(ctx)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	start := time.Now()
	m.pending.value = ""
	c := &call{m: m, ctx: ctx, retry: retry, phases: make(map[context.Context]int)}
	var err error
	if retry {
		err = m.m.LockContext(context.WithValue(ctx, callKey{}, c))
	} else {
		err = m.m.TryLockContext(context.WithValue(ctx, callKey{}, c))
	}
	c.mu.Lock()
	attempts, holder, refused, lease := max((c.phase+1)/2, 1), c.holder, c.refused, c.lease
	if c.ttl > 0 {
		m.ttl = c.ttl
	}
	c.done = true
	c.mu.Unlock()
	if lease == "" { // no attempt reached a node
		lease = m.leaseOf(m.pending.value)
	}
	now := time.Now()
	if err != nil {
		reason := event.ReasonError
		var taken *redsync.ErrTaken
		var node *redsync.ErrNodeTaken
		switch {
		case errors.Is(err, redsync.ErrFailed) && ctx.Err() != nil:
			reason = event.ReasonTimeout
			if errors.Is(ctx.Err(), context.Canceled) {
				reason = event.ReasonCanceled
			}
		case retry && attempts > 1 && (errors.As(err, &taken) || errors.As(err, &node) || errors.Is(err, redsync.ErrFailed) && refused):
			// A LockContext that retried and ran out of tries gave up
			// waiting: a timeout, as an Obtain's deadline (and the Python
			// package's blocking_timeout) report it. Only a try-once
			// refusal is "held".
			reason = event.ReasonTimeout
		case errors.As(err, &taken), errors.As(err, &node), errors.Is(err, redsync.ErrFailed) && refused:
			reason = event.ReasonHeld
		}
		m.r.record(event.Event{Type: event.Failed, Key: m.name, Owner: m.r.owner, Lease: lease, TS: now.UnixNano(),
			Wait: now.Sub(start), Attempts: attempts, Reason: reason, Holder: holder})
		return err
	}
	m.lease, m.since = lease, now
	m.setHeld(true)
	m.r.record(event.Event{Type: event.Acquired, Key: m.name, Owner: m.r.owner, Lease: lease, TS: now.UnixNano(),
		Wait: now.Sub(start), TTL: m.ttl, Attempts: attempts, Reason: event.JoinLeases(lock.HeldLeases(ctx))})
	return nil
}

// leaseOf returns the lease of a value this call writes: the one genValue
// made, or, for a value of the caller's, the lease a lockscope value
// carries, or a fresh id.
func (m *Mutex) leaseOf(value string) string {
	if value == m.pending.value && value != "" {
		return m.pending.lease
	}
	if v, err := lock.ParseValue(value); err == nil {
		return v.Lease
	}
	return lock.NewLeaseID()
}

func (m *Mutex) setHeld(h bool) (was bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	was, m.held = m.held, h
	return was
}

// Context returns ctx carrying the mutex's lease while it is held: a lock
// call made with it, through this package or redislockscope, lists the
// lease in its waiting event, which is how the collector finds a deadlock
// among such calls. (The lock package's own obtains do not look for it.)
func (m *Mutex) Context(ctx context.Context) context.Context {
	lease := m.lease
	return lock.WithHeld(ctx, lease, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.held && m.lease == lease
	})
}

// hold returns the lease and owner of the current hold, from the value when
// the mutex did not take it (WithValue).
func (m *Mutex) hold() (lease, owner string, since time.Time) {
	if m.lease != "" {
		return m.lease, m.r.owner, m.since
	}
	if v, err := lock.ParseValue(m.m.Value()); err == nil {
		return v.Lease, v.Owner, v.Since
	}
	return "", m.r.owner, time.Time{}
}

func (m *Mutex) event(t event.Type) event.Event {
	lease, owner, since := m.hold()
	e := event.Event{Type: t, Key: m.name, Owner: owner, Lease: lease, TS: time.Now().UnixNano()}
	if !since.IsZero() && (t == event.Released || t == event.Lost) {
		e.Hold = time.Unix(0, e.TS).Sub(since)
	}
	return e
}

// Unlock unlocks m, as redsync's.
func (m *Mutex) Unlock() (bool, error) { return m.UnlockContext(context.Background()) }

// UnlockContext unlocks m, as redsync's, and records the release (reason
// not_owner when the lock had expired or was another's). On Redis errors
// alone nothing is recorded: the lock expires at its TTL.
func (m *Mutex) UnlockContext(ctx context.Context) (bool, error) {
	ok, err := m.m.UnlockContext(ctx)
	if m.r.rec == nil {
		return ok, err
	}
	m.setHeld(false)
	switch {
	case ok:
		m.r.record(m.event(event.Released))
	case notOwner(err):
		e := m.event(event.Released)
		e.Reason = event.ReasonNotOwner
		m.r.record(e)
	}
	return ok, err
}

// Extend resets the mutex's expiry, as redsync's.
func (m *Mutex) Extend() (bool, error) { return m.ExtendContext(context.Background()) }

// ExtendContext resets the mutex's expiry, as redsync's, and records a
// renewal; a lock found expired or another's is recorded lost, a Redis error
// a failed renewal.
func (m *Mutex) ExtendContext(ctx context.Context) (bool, error) {
	if m.r.rec == nil {
		return m.m.ExtendContext(ctx)
	}
	c := &call{m: m, ctx: ctx, phases: make(map[context.Context]int)}
	// redsync's validity (Until) is the last lock or extend call's start
	// plus the expiry, less the clock drift: the key lives at least that
	// long. The extension landed before its reply: what was left then is at
	// least Until less the reply's time.
	until := m.m.Until()
	ok, err := m.m.ExtendContext(context.WithValue(ctx, callKey{}, c))
	reply := time.Now()
	c.mu.Lock()
	if c.ttl > 0 {
		m.ttl = c.ttl
	}
	c.done = true
	c.mu.Unlock()
	switch {
	case ok || errors.Is(err, redsync.ErrExtendFailed):
		// ErrExtendFailed: the quorum extended the key, too late for
		// redsync's validity; Redis holds it for the expiry again.
		e := m.event(event.Renewed)
		e.TTL = m.ttl
		if !until.IsZero() {
			e.Headroom = max(until.Sub(reply), time.Nanosecond)
		}
		m.r.record(e)
	case notOwner(err):
		if m.setHeld(false) || m.lease == "" {
			e := m.event(event.Lost)
			e.Reason = event.ReasonNotOwner
			m.r.record(e)
		}
	default:
		e := m.event(event.RenewFailed)
		e.Reason = event.ReasonError
		m.r.record(e)
	}
	return ok, err
}

// Valid reports whether the lock is still valid, as redsync's.
//
// Deprecated: Use Until instead (as redsync says).
func (m *Mutex) Valid() (bool, error) { return m.m.ValidContext(context.Background()) }

// ValidContext reports whether the lock is still valid, as redsync's.
//
// Deprecated: Use Until instead (as redsync says).
func (m *Mutex) ValidContext(ctx context.Context) (bool, error) { return m.m.ValidContext(ctx) }

// notOwner reports whether err says that nodes hold the key for another
// value or not at all, rather than that they could not be reached.
func notOwner(err error) bool {
	var taken *redsync.ErrTaken
	var node *redsync.ErrNodeTaken
	var rerr *redsync.RedisError
	if errors.As(err, &rerr) {
		return false
	}
	return errors.Is(err, redsync.ErrLockAlreadyExpired) || errors.As(err, &taken) || errors.As(err, &node)
}

func (r *Redsync) record(e event.Event) { r.rec.Record(e) }

// callKey carries the *call of a lock call to the wrapped pools.
type callKey struct{}

// call is what the wrapped pools see of one lock call. redsync runs each
// round on every pool at once, with a context of its own per round: the
// rounds are told apart by their contexts. Odd phases acquire, even ones
// release what a failed round took.
type call struct {
	m     *Mutex
	ctx   context.Context
	retry bool

	mu      sync.Mutex
	phases  map[context.Context]int
	phase   int
	refused bool   // a node answered that another value holds the key
	holder  string // who holds it, read after the first refusal
	lease   string
	ttl     time.Duration
	waiting bool
	done    bool
}

// enter notes a pool call made under ctx: the first of a new round moves
// the phase on, and the first release after a refused first round, when
// the call will retry, is when its wait begins.
func (c *call) enter(ctx context.Context) {
	c.mu.Lock()
	if _, ok := c.phases[ctx]; ok || c.done {
		c.mu.Unlock()
		return
	}
	c.phase++
	c.phases[ctx] = c.phase
	wait := c.phase == 2 && c.refused && c.retry && !c.waiting
	c.waiting = c.waiting || wait
	holder, lease := c.holder, c.lease
	c.mu.Unlock()
	if wait {
		e := event.Event{Type: event.Waiting, Key: c.m.name, Owner: c.m.r.owner, Lease: lease, TS: time.Now().UnixNano(),
			Attempts: 1, Holder: holder, Reason: event.JoinLeases(lock.HeldLeases(c.ctx))}
		if dl, ok := c.ctx.Deadline(); ok {
			e.Wait = max(time.Until(dl), 0)
		}
		c.m.r.record(e)
	}
}

// setNX notes an acquire attempt's answer on one node.
func (c *call) setNX(conn redis.Conn, name, value string, ok bool, err error, expiry time.Duration) {
	c.mu.Lock()
	if c.lease == "" {
		c.lease = c.m.leaseOf(value)
	}
	c.ttl = expiry
	first := !ok && err == nil && !c.refused
	c.refused = c.refused || (!ok && err == nil)
	c.mu.Unlock()
	if first {
		if v, err := conn.Get(name); err == nil && v != "" {
			h := lock.HolderName(v)
			c.mu.Lock()
			c.holder = h
			c.mu.Unlock()
		}
	}
}

// pool is a redsync pool whose connections report to the lock call whose
// context they were taken for.
type pool struct{ redis.Pool }

func (p pool) Get(ctx context.Context) (redis.Conn, error) {
	c, _ := ctx.Value(callKey{}).(*call)
	if c != nil {
		c.enter(ctx)
	}
	conn, err := p.Pool.Get(ctx)
	if err != nil || c == nil {
		return conn, err
	}
	return &watchedConn{Conn: conn, call: c}, nil
}

type watchedConn struct {
	redis.Conn
	call *call
}

// Eval notes the expiry an extension sets: redsync's touch scripts take
// (name, value, expiry ms); its delete script takes two arguments.
func (w *watchedConn) Eval(script *redis.Script, keysAndArgs ...any) (any, error) {
	if len(keysAndArgs) == 3 {
		if ms, ok := keysAndArgs[2].(int); ok && ms > 0 {
			w.call.mu.Lock()
			w.call.ttl = time.Duration(ms) * time.Millisecond
			w.call.mu.Unlock()
		}
	}
	return w.Conn.Eval(script, keysAndArgs...)
}

func (w *watchedConn) SetNX(name, value string, expiry time.Duration) (bool, error) {
	ok, err := w.Conn.SetNX(name, value, expiry)
	w.call.setNX(w.Conn, name, value, ok, err, expiry)
	return ok, err
}

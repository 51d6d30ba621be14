// Package redislockscope instruments github.com/bsm/redislock for lockscope:
// a Client with redislock's calls and errors whose locks report every step
// (waiting, acquired, failed, released, renewed, lost) through a
// lock.Recorder, usually a *lock.Emitter. A team keeps redislock and gains
// what a failed SET NX never shows in Redis: who waits, for how long, who
// gives up, and deadlocks between callers.
//
//	em := lock.NewEmitter(rdb, nil)
//	defer em.Close(ctx)
//	locker := redislockscope.New(rdb, &redislockscope.Options{Recorder: em, Owner: "billing"})
//	l, err := locker.Obtain(ctx, "invoice:42", 10*time.Second, &redislock.Options{
//		RetryStrategy: redislock.LinearBackoff(50 * time.Millisecond),
//	})
//	if errors.Is(err, redislock.ErrNotObtained) { ... }
//	defer l.Release(ctx)
//
// The lock's value is lockscope's (lock.Value: a secret token, the lease id,
// the obtain's start time and the owner) instead of redislock's random
// token, unless Options.Token sets one; Options.Metadata still follows it,
// and Lock.Token and Lock.Metadata return what they return with redislock.
package redislockscope

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
)

// The errors are redislock's own: errors.Is works against either name.
var (
	ErrNotObtained = redislock.ErrNotObtained
	ErrLockNotHeld = redislock.ErrLockNotHeld
)

// Options configures a Client. A nil *Options records nothing.
type Options struct {
	// Recorder receives the events; nil means none (the bare library).
	Recorder lock.Recorder
	// Owner names this caller on the dashboard; "" means lock.DefaultOwner().
	Owner string
}

// Client is redislock.Client with events.
type Client struct {
	c     *redislock.Client
	rdb   redislock.RedisClient
	rec   lock.Recorder
	owner string
}

// New wraps client as redislock.New does.
func New(client redislock.RedisClient, opt *Options) *Client {
	c := &Client{c: redislock.New(client), rdb: client}
	if opt != nil {
		c.rec, c.owner = opt.Recorder, opt.Owner
	}
	if c.owner == "" {
		c.owner = lock.DefaultOwner()
	}
	return c
}

// getScript reads a key through the Scripter interface redislock asks for.
var getScript = redis.NewScript(`return redis.call("GET", KEYS[1])`)

// holder names who holds key now; "" when it is free or cannot be read.
func (c *Client) holder(ctx context.Context, key string) string {
	v, err := getScript.Run(ctx, c.rdb, []string{key}).Text()
	if err != nil {
		return ""
	}
	return lock.HolderName(v)
}

func (c *Client) record(e event.Event) {
	if e.TS == 0 {
		e.TS = time.Now().UnixNano()
	}
	c.rec.Record(e)
}

// Obtain is redislock's Obtain: the same retries, the same errors. The first
// refused attempt of an obtain that will retry records a waiting event
// naming the holder (read with one GET), the deadline, and the leases ctx
// carries (Lock.Context); the outcome records acquired or failed.
func (c *Client) Obtain(ctx context.Context, key string, ttl time.Duration, opt *redislock.Options) (*Lock, error) {
	if c.rec == nil {
		l, err := c.c.Obtain(ctx, key, ttl, opt)
		if err != nil {
			return nil, err
		}
		return &Lock{l: l, c: c}, nil
	}
	start := time.Now()
	var o redislock.Options
	if opt != nil {
		o = *opt
	}
	var lease string
	if o.Token == "" {
		o.Token, lease = lock.NewValue(c.owner, start)
	} else {
		lease = lock.NewLeaseID()
	}
	w := &watch{c: c, ctx: ctx, key: key, lease: lease, ttl: ttl, inner: o.RetryStrategy}
	if w.inner == nil {
		w.inner = redislock.NoRetry()
	}
	o.RetryStrategy = w
	l, err := c.c.Obtain(ctx, key, ttl, &o)
	if err != nil {
		reason := event.ReasonError
		switch {
		case errors.Is(err, redislock.ErrNotObtained):
			reason = event.ReasonHeld
		case errors.Is(err, context.DeadlineExceeded):
			reason = event.ReasonTimeout // redislock gives a call without deadline one of ttl
		case errors.Is(err, context.Canceled):
			reason = event.ReasonCanceled
		}
		c.record(event.Event{Type: event.Failed, Key: key, Owner: c.owner, Lease: lease, Wait: time.Since(start),
			Attempts: max(w.refused, 1), Reason: reason, Holder: w.holder})
		return nil, err
	}
	now := time.Now()
	c.record(event.Event{Type: event.Acquired, Key: key, Owner: c.owner, Lease: lease, TS: now.UnixNano(),
		Wait: now.Sub(start), TTL: ttl, Attempts: w.refused + 1, Reason: event.JoinLeases(lock.HeldLeases(ctx))})
	// The attempt that took the lock was sent after the last backoff began
	// (or at start): its TTL runs at least until then + ttl.
	sent := start
	if !w.lastRefused.IsZero() {
		sent = w.lastRefused
	}
	return &Lock{l: l, c: c, lease: lease, since: now, held: true, validUntil: sent.Add(ttl)}, nil
}

// watch is the retry strategy of one Obtain: the caller's, watched.
// redislock calls NextBackoff after each refused attempt, on the Obtain's
// goroutine.
type watch struct {
	c          *Client
	ctx        context.Context
	key, lease string
	ttl        time.Duration
	inner      redislock.RetryStrategy
	refused    int
	holder     string
	// lastRefused: when the last refused attempt's backoff was asked for;
	// the next attempt is sent after it.
	lastRefused time.Time
}

func (w *watch) NextBackoff() time.Duration {
	w.refused++
	w.lastRefused = time.Now()
	d := w.inner.NextBackoff()
	if w.refused == 1 {
		w.holder = w.c.holder(w.ctx, w.key)
		if d >= 1 { // it will retry: a wait begins
			budget := w.ttl // redislock's own deadline when ctx has none
			if dl, ok := w.ctx.Deadline(); ok {
				budget = time.Until(dl)
			}
			w.c.record(event.Event{Type: event.Waiting, Key: w.key, Owner: w.c.owner, Lease: w.lease,
				Wait: max(budget, 0), Attempts: 1, Holder: w.holder, Reason: event.JoinLeases(lock.HeldLeases(w.ctx))})
		}
	}
	return d
}

// Lock is an obtained redislock.Lock with events.
type Lock struct {
	l     *redislock.Lock
	c     *Client
	lease string
	since time.Time

	mu   sync.Mutex
	held bool // until released or known lost
	// validUntil is the earliest the key's TTL can run out, by the local
	// clock: the last write's send time plus its TTL.
	validUntil time.Time
}

// Key returns the redis key used by the lock.
func (l *Lock) Key() string { return l.l.Key() }

// Token returns the token value set by the lock.
func (l *Lock) Token() string { return l.l.Token() }

// Metadata returns the metadata of the lock.
func (l *Lock) Metadata() string { return l.l.Metadata() }

// ID returns the public lease id the lock's events carry ("" without a
// Recorder).
func (l *Lock) ID() string { return l.lease }

// Unwrap returns the redislock.Lock (calls on it record nothing).
func (l *Lock) Unwrap() *redislock.Lock { return l.l }

// TTL returns the remaining time-to-live, as redislock's.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) { return l.l.TTL(ctx) }

// Context returns ctx carrying the lock's lease while it is held: an Obtain
// made with it, through this package or redsyncscope, lists the lease in its
// waiting event, which is how the collector finds a deadlock among such
// calls. (The lock package's own obtains do not look for it.)
func (l *Lock) Context(ctx context.Context) context.Context {
	return lock.WithHeld(ctx, l.lease, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.held
	})
}

// renewed records a refresh sent at sent that set ttl and returns its
// headroom: the TTL left when it landed, at least (the previous write's TTL
// ran at least until validUntil; the refresh landed before its reply, now).
// 1ns when nothing was provably left, 0 when unknown.
func (l *Lock) renewed(sent time.Time, ttl time.Duration) time.Duration {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var headroom time.Duration
	if !l.validUntil.IsZero() {
		headroom = max(l.validUntil.Sub(now), time.Nanosecond)
	}
	l.validUntil = sent.Add(ttl)
	return headroom
}

func (l *Lock) end() (wasHeld bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	wasHeld, l.held = l.held, false
	return wasHeld
}

func (l *Lock) event(t event.Type) event.Event {
	return event.Event{Type: t, Key: l.l.Key(), Owner: l.c.owner, Lease: l.lease, TS: time.Now().UnixNano()}
}

// Refresh extends the lock with a new TTL, as redislock's, and records it as
// a renewal; ErrNotObtained (the lock is gone or another's) records the
// lock lost, another error a failed renewal.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration, opt *redislock.Options) error {
	sent := time.Now()
	err := l.l.Refresh(ctx, ttl, opt)
	if l.c.rec == nil {
		return err
	}
	switch {
	case err == nil:
		e := l.event(event.Renewed)
		e.TTL = ttl
		e.Headroom = l.renewed(sent, ttl)
		l.c.record(e)
	case errors.Is(err, redislock.ErrNotObtained):
		if l.end() {
			e := l.event(event.Lost)
			e.Reason, e.Hold = event.ReasonNotOwner, time.Unix(0, e.TS).Sub(l.since)
			l.c.record(e)
		}
	default:
		e := l.event(event.RenewFailed)
		e.Reason = event.ReasonError
		l.c.record(e)
	}
	return err
}

// Release releases the lock, as redislock's; ErrLockNotHeld records a
// release that found the lock no longer its own (reason not_owner). On a
// Redis error nothing is recorded: the lock expires at its TTL.
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return redislock.ErrLockNotHeld
	}
	err := l.l.Release(ctx)
	if l.c.rec == nil {
		return err
	}
	l.end()
	if err == nil || errors.Is(err, redislock.ErrLockNotHeld) {
		e := l.event(event.Released)
		e.Hold = time.Unix(0, e.TS).Sub(l.since)
		if err != nil {
			e.Reason = event.ReasonNotOwner
		}
		l.c.record(e)
	}
	return err
}

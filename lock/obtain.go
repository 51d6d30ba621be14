package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/redis/go-redis/v9"
)

// ObtainOptions configures one Obtain, Try or Do. A nil *ObtainOptions is the
// zero value.
type ObtainOptions struct {
	// Retry decides whether and when to try again while the lock is held by
	// another owner or Redis is unreachable; nil means a single attempt.
	// Waits never run past the context's deadline.
	Retry RetryStrategy
	// AutoRenew renews the lock every ttl/3 until Release or loss (Do always
	// renews).
	AutoRenew bool
	// MaxHold, with AutoRenew, bounds the hold: when it is reached the
	// renewal stops and the lease counts as lost (reason max_hold, its context
	// cancelled) while the key still has up to one TTL left, so the work can
	// stop before another owner can take over. 0 means no limit.
	MaxHold time.Duration
	// Fencing attaches a strictly increasing fencing token (Lease.Fence).
	Fencing bool
	// Owner overrides Options.Owner for this lock.
	Owner string
	// AtRisk, if set, warns the caller that the lease is close to lapsing,
	// so the work can get ready to stop before another owner can take the
	// lock: it is called, on its own goroutine, when less than AtRiskBelow
	// of the TTL is left and no renewal (automatic, or Refresh) has landed
	// since the last write, with what is left (by the local clock, counting
	// from when that write was sent). The lease is lost at the end of it
	// unless a renewal lands first; each write re-arms the warning.
	// Renewals run late when the process is starved (GC pauses, CPU
	// throttling) or Redis is slow; Lease.Headroom tells, after the fact,
	// how close the last one came. nil means no warning.
	AtRisk func(l *Lease, left time.Duration)
	// AtRiskBelow is the fraction of the TTL under which AtRisk is called.
	// 0 means DefaultAtRiskBelow (a quarter): an automatic renewal is sent
	// every ttl/3, so with less than a quarter left it is late by more than
	// five twelfths of the TTL.
	AtRiskBelow float64
}

var errTTL = errors.New("lock: ttl must be at least 1ms")

// Obtain takes the lock key for ttl. Without a retry strategy it makes one
// attempt; with one it waits between attempts until the strategy gives up or
// ctx ends. On failure the error is a *NotObtainedError (errors.Is
// ErrNotObtained) that names the holder and its remaining TTL. The lease's
// context inherits ctx's values but not its cancellation: ctx bounds the
// wait, not the hold.
func (c *Client) Obtain(ctx context.Context, key string, ttl time.Duration, opt *ObtainOptions) (*Lease, error) {
	l, _, err := c.obtain(ctx, true, key, ttl, opt, false)
	return l, err
}

// Try makes one attempt. If the lock is held it returns a nil lease, the
// current holder and an error matching ErrNotObtained (reason held).
func (c *Client) Try(ctx context.Context, key string, ttl time.Duration, opt *ObtainOptions) (*Lease, *Holder, error) {
	return c.obtain(ctx, true, key, ttl, opt, true)
}

// Do obtains key, renews it automatically while fn runs, runs fn with the
// lease's context (cancelled as soon as the lock is known lost, or when ctx
// ends), then releases the lock. It returns fn's error; if the lock was lost
// while fn ran, the error also matches ErrLost (and a context.Canceled from
// fn that the loss caused is replaced by it).
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, opt *ObtainOptions, fn func(ctx context.Context) error) error {
	o := ObtainOptions{}
	if opt != nil {
		o = *opt
	}
	o.AutoRenew = true
	l, _, err := c.obtain(ctx, false, key, ttl, &o, false)
	if err != nil {
		return err
	}
	ferr := fn(l.Context())
	lost := l.Err()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	rerr := l.Release(rctx)
	cancel()
	if lost == nil && errors.Is(rerr, ErrNotHeld) {
		lost = &lostError{reason: "expired"} // gone between two renewals
	} else if rerr != nil && !errors.Is(rerr, ErrNotHeld) {
		ferr = errors.Join(ferr, rerr)
	}
	if lost == nil {
		return ferr
	}
	if ferr == nil || errors.Is(ferr, context.Canceled) && ctx.Err() == nil {
		return lost
	}
	return errors.Join(ferr, lost)
}

// attempt is the state of one Obtain call. l is the lease it will return if
// it obtains: allocated up front, it holds the commands' arguments.
type attempt struct {
	l        *Lease
	keys     []string // in l: the key, and the fence key when fencing
	key      string
	owner    string
	ttl      time.Duration
	start    time.Time
	attempts int
	trace    event.TraceID // of the obtain's ctx (Options.TraceContext), for every event of the call and its hold
	span     event.SpanID
}

func (c *Client) obtain(ctx context.Context, detach bool, key string, ttl time.Duration, opt *ObtainOptions, once bool) (*Lease, *Holder, error) {
	if ttl < time.Millisecond {
		return nil, nil, errTTL
	}
	var o ObtainOptions
	if opt != nil {
		o = *opt
	}
	retry := o.Retry
	if retry == nil || once {
		retry = noRetry{}
	}
	a := attempt{key: key, ttl: ttl, owner: c.owner, start: time.Now()}
	if o.Owner != "" {
		a.owner = o.Owner
	}
	if c.trace != nil {
		a.trace, a.span = c.trace(ctx)
	}
	l := &Lease{c: c, key: key, owner: a.owner, ttl: ttl, ttlMs: int64((ttl + time.Millisecond - 1) / time.Millisecond)}
	a.l = l
	l.head = newHead()
	l.headArg = &l.head
	l.keyArr[0] = key
	a.keys = l.keyArr[:1]
	if o.Fencing {
		l.keyArr[1] = FenceKey(key)
		a.keys = l.keyArr[:2]
	}
	l.args = [...]any{"set", &l.key, &l.value, "nx", "px", &l.ttlMs, "get"}

	var (
		holder     *Holder
		ttlUnknown bool // holder came from a retry's SET ... GET: its TTL was not read
		reason     string
		cause      error
		timer      *time.Timer
	)
	for {
		if ctx.Err() != nil {
			return nil, holder, c.fail(&a, holder, ctxReason(ctx), ctx.Err())
		}
		a.attempts++
		// Reading the clock is not free (some 250 ns where a VM's clock
		// source has no fast path, as kvm-clock here): the first attempt
		// starts when the call does.
		at := a.start
		if a.attempts > 1 {
			at = time.Now()
		}
		var res any
		var err error
		ttlUnknown = false
		if h := c.local.holder(key); h != nil {
			// A degraded lease of this process still holds the key: Redis
			// knows nothing of it, so honour it here.
			holder, reason, cause = h, event.ReasonHeld, nil
		} else if len(a.keys) == 1 && !c.batch.noSetGet.Load() {
			// Without fencing a native SET does what obtain.lua does (see
			// batcher.setObtain).
			first := a.attempts == 1
			var vbuf [128]byte
			b := append(vbuf[:0], l.head...)
			l.value = string(appendTail(append(b, '0'), at, a.owner))
			ok, v, serr := c.batch.setObtain(ctx, l, !first)
			switch {
			case errors.Is(serr, errSetGetUnsupported):
				c.batch.noSetGet.Store(true)
				res, err = c.obtainScript(ctx, &a, at).Result()
			case serr != nil:
				err = serr
			case ok:
				res = int64(0)
			case first:
				// Refused: who holds it, for how long (the error, Try and
				// the waiting event name the holder), in one atomic read.
				h, ierr := c.Inspect(ctx, key)
				switch {
				case ierr == nil && !h.Foreign && h.Lease == l.ID():
					res = int64(0) // ours: go-redis retried a SET that had run
				case ierr == nil:
					holder, reason, cause = h, event.ReasonHeld, nil
				case errors.Is(ierr, ErrNotHeld):
					holder, reason, cause = nil, event.ReasonHeld, nil // released meanwhile
				default:
					err = ierr
				}
			default:
				res, ttlUnknown = []any{v, int64(0)}, true
			}
		} else {
			res, err = c.obtainScript(ctx, &a, at).Result()
		}
		if err == nil && res != nil {
			ok, fence, h, perr := parseObtain(key, res)
			switch {
			case perr != nil:
				return nil, nil, c.fail(&a, nil, event.ReasonError, perr)
			case ok:
				return c.acquired(ctx, detach, &a, &o, at, fence, false), nil, nil
			}
			holder, reason, cause = h, event.ReasonHeld, nil
		}
		rtt := time.Since(at) // the attempt's round trips: read only when it failed
		if err != nil {
			if cerr := ended(ctx); cerr != nil {
				// The script may have run: free the key if it did.
				go releaseOrphan(c.rdb, key, l.headArg, a.ttl, true)
				return nil, holder, c.fail(&a, holder, ctxReason(ctx), cerr)
			}
			if c.local != nil && unreachable(err) {
				var fence int64
				if o.Fencing {
					fence = localFence()
				}
				v := Value{Token: headToken(l.head), Lease: l.ID(), Fence: fence, Since: at, Owner: a.owner}
				h := c.local.obtain(key, v, ttl)
				if h == nil {
					return c.acquired(ctx, detach, &a, &o, at, fence, true), nil, nil
				}
				holder, reason, cause = h, event.ReasonHeld, nil
			} else {
				reason, cause = event.ReasonError, err
				if final(err) {
					return nil, holder, c.fail(&a, holder, reason, err)
				}
			}
		}

		wait, again := retry.Backoff(a.attempts)
		if !again {
			if ttlUnknown && reason == event.ReasonHeld {
				holder = c.holderTTL(ctx, holder)
			}
			return nil, holder, c.fail(&a, holder, reason, cause)
		}
		if a.attempts == 1 && reason == event.ReasonHeld && c.rec != nil {
			c.waiting(ctx, &a, holder)
		}
		if dl, ok := ctx.Deadline(); ok {
			// Leave room for the next attempt's round trip before the
			// deadline; if there is none, give up now rather than late.
			left := time.Until(dl) - rtt
			if left <= 0 {
				return nil, holder, c.fail(&a, holder, event.ReasonTimeout, context.DeadlineExceeded)
			}
			wait = min(wait, left)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return nil, holder, c.fail(&a, holder, ctxReason(ctx), ctx.Err())
		case <-timer.C:
		}
	}
}

// obtainScript takes the key with obtain.lua (fencing, or a Redis before
// 7.0), in an attempt made at at.
func (c *Client) obtainScript(ctx context.Context, a *attempt, at time.Time) *redis.Cmd {
	l := a.l
	var tbuf [64]byte
	tail := string(appendTail(tbuf[:0], at, l.owner))
	return c.batch.runCmd(ctx, obtainScript, obtainScript.evalSha(a.keys, []any{l.headArg, tail, &l.ttlMs}), l)
}

// holderTTL completes a holder seen by a retry's SET ... GET, which does not
// read the TTL, when the failure is final and the context leaves time for
// one more round trip: an inspect, which also shows a holder that took over
// meanwhile. It keeps h (TTL 0, unknown) when the key is gone or on error.
// Only contended calls that give up pay for it; every retry saves a PTTL
// (see BENCHMARKS.md, issue 16).
func (c *Client) holderTTL(ctx context.Context, h *Holder) *Holder {
	if now, err := c.Inspect(ctx, h.Key); err == nil {
		return now
	}
	return h
}

func parseObtain(key string, res any) (ok bool, fence int64, h *Holder, err error) {
	switch r := res.(type) {
	case int64:
		return true, r, nil, nil
	case []any:
		if v, pttl, err := valuePTTL(r); err == nil {
			return false, 0, newHolder(key, v, pttl, 0), nil
		}
	}
	return false, 0, nil, errors.New("lock: unexpected reply from obtain script")
}

// final reports whether retrying cannot help: Redis answered with an error
// other than the ones a failover, a loading replica or a busy script cause.
func final(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	for _, p := range [...]string{"LOADING", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "BUSY", "NOREPLICAS"} {
		if redis.HasErrorPrefix(err, p) {
			return false
		}
	}
	return true
}

func ctxReason(ctx context.Context) string {
	if errors.Is(ended(ctx), context.DeadlineExceeded) {
		return event.ReasonTimeout
	}
	return event.ReasonCanceled
}

// ended returns ctx's error, or context.DeadlineExceeded once its deadline
// has passed even if its timer has not fired yet: a client that enforces
// deadlines itself (ContextTimeoutEnabled) sets the connection's deadline
// to the context's, and its "i/o timeout" can come back a moment before
// ctx.Err() says so. Such a call ended by its deadline, and a SET it sent
// may have run.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *Client) fail(a *attempt, holder *Holder, reason string, cause error) error {
	err := &NotObtainedError{Key: a.key, Holder: holder, Reason: reason, Attempts: a.attempts, Wait: time.Since(a.start), Err: cause}
	if c.rec != nil {
		e := event.Event{Type: event.Failed, Key: a.key, Owner: a.owner, Lease: a.l.ID(),
			Wait: err.Wait, Attempts: a.attempts, Reason: reason, TraceID: a.trace, SpanID: a.span}
		if holder != nil {
			e.Holder, e.Degraded = holder.Owner, holder.Degraded
		}
		c.record(e)
	}
	return err
}

// waiting records that the call found the lock held and will retry: once
// per wait, so that who waits on whom is known while it happens.
func (c *Client) waiting(ctx context.Context, a *attempt, holder *Holder) {
	e := event.Event{Type: event.Waiting, Key: a.key, Owner: a.owner, Lease: a.l.ID(), Attempts: 1,
		Reason: event.JoinLeases(HeldLeases(ctx)), TraceID: a.trace, SpanID: a.span}
	if holder != nil {
		e.Holder, e.Degraded = holder.Owner, holder.Degraded
	}
	if dl, ok := ctx.Deadline(); ok {
		e.Wait = max(time.Until(dl), 0)
	}
	c.record(e)
}

func (c *Client) acquired(ctx context.Context, detach bool, a *attempt, o *ObtainOptions, at time.Time, fence int64, degraded bool) *Lease {
	l := a.l
	l.fence, l.since, l.degraded, l.autoRenew, l.maxHold = fence, at, degraded, o.AutoRenew, o.MaxHold
	l.validUntil, l.parent, l.detach = at.Add(a.ttl), ctx, detach
	l.trace, l.span = a.trace, a.span
	if o.AtRisk != nil {
		l.atRisk, l.riskFrac = o.AtRisk, o.AtRiskBelow
		if l.riskFrac <= 0 {
			l.riskFrac = DefaultAtRiskBelow
		}
		l.mu.Lock()
		l.armWarn()
		l.mu.Unlock()
	}
	l.outer, _ = FromContext(ctx)
	if c.rec != nil {
		// The event's time is the lease's since, the time the value
		// stored in Redis carries: a collector rebuilding from the value
		// and one that saw the event show the same acquisition time.
		// Reason lists the leases the caller already holds (the
		// lock-order graph's edges); "" at no cost when it holds none.
		c.record(event.Event{Type: event.Acquired, Key: a.key, Owner: a.owner, Lease: l.ID(), TS: at.UnixNano(),
			Wait: time.Since(a.start), TTL: a.ttl, Attempts: a.attempts, Fence: fence, Degraded: degraded,
			Reason: event.JoinLeases(HeldLeases(ctx)), TraceID: a.trace, SpanID: a.span})
	}
	if o.AutoRenew {
		l.startRenewal()
	}
	return l
}

// releaseOrphan deletes a lock taken for a caller that stopped waiting. It
// tries for as long as the lock can live (ttl): a release that comes late
// still frees the key before its TTL would, and after it the script finds
// the key gone or another holder's and changes nothing. (One second, as
// before, was not enough when thousands of callers gave up at once on a
// busy machine: the releases waited for connections and the keys stayed
// held by nobody until their TTL.)
//
// It tries again while the answer is lost on the way (the obtain's reply
// was often lost the same way, on a stalled or broken connection), until
// Redis answers or the time is up. unsure says the obtain's own reply was
// lost: it may not have run yet, since it went on a connection go-redis
// has given up on and Redis may read it after this release, which goes on
// another. Then a release that found nothing looks again, after orphanRetry
// and then twice as long each time, for as long as the lock can live: a
// request Redis held back (a pause, a stall, a queue of thousands) may run
// seconds later, and a release that stopped looking after a second left
// such a key held by nobody until its TTL. Each look is one round trip,
// and only an abandoned obtain makes them.
func releaseOrphan(rdb redis.UniversalClient, key string, head any, ttl time.Duration, unsure bool) {
	ctx, cancel := context.WithTimeout(context.Background(), max(ttl, time.Second))
	defer cancel()
	pause := orphanRetry
	for {
		n, err := releaseScript.Run(ctx, rdb, []string{key}, head).Int64()
		var re redis.Error
		switch {
		case err == nil && n == 1:
			return
		case err == nil && !unsure:
			return // the obtain ran and is gone already
		case errors.As(err, &re), errors.Is(err, redis.ErrClosed):
			return // Redis answered, or the client was closed: nobody can release
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		if err == nil {
			pause *= 2 // nothing of ours there yet: look again, less often
		}
	}
}

// orphanRetry is the pause between two tries of releaseOrphan.
const orphanRetry = 100 * time.Millisecond

var localFenceState struct {
	sync.Mutex
	last int64
}

// localFence issues a degraded-mode fence on the same scale as the Redis
// ones (microseconds since the epoch), so with synchronised clocks it is
// above every fence Redis issued before the outage.
func localFence() int64 {
	localFenceState.Lock()
	defer localFenceState.Unlock()
	localFenceState.last = max(localFenceState.last+1, time.Now().UnixMicro())
	return localFenceState.last
}

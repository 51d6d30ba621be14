package lock

import (
	"context"
	"sync"
	"time"

	"github.com/lockscope/lockscope/event"
)

const (
	stateHeld = iota
	stateLost
	stateReleased
)

// Lease is one hold of a lock. Its methods are safe for concurrent use.
type Lease struct {
	c         *Client
	key       string
	head      string // value head "ls1|<token>|<lease>|": proves ownership; holds the token and the lease id
	headArg   any    // &head: a command argument that costs no allocation
	owner     string
	fence     int64
	since     time.Time
	degraded  bool
	autoRenew bool
	maxHold   time.Duration
	trace     event.TraceID // of the obtain's ctx: every event of the hold carries it
	span      event.SpanID
	atRisk    func(*Lease, time.Duration) // ObtainOptions.AtRisk
	riskFrac  float64                     // ObtainOptions.AtRiskBelow (defaulted)

	mu         sync.Mutex
	ttl        time.Duration
	validUntil time.Time // the latest the lock can be valid: last write's start + TTL
	state      int
	err        error
	parent     context.Context // until the lease context exists
	detach     bool            // the parent's cancellation does not reach the lease
	listens    bool            // ReleaseRequested was called: the client's listener has it (listen.go); in padding, the Lease stays 480 bytes
	ctx        context.Context
	outer      *Lease // the lease whose context the obtain ran under, if any
	cancel     context.CancelCauseFunc
	expiry     *time.Timer   // without renewal: marks the lease lost at validUntil
	stop       chan struct{} // closed to end the renewal
	headroom   time.Duration // what the last renewal left (see renewed); 0 before the first
	warn       *time.Timer   // with atRisk: fires when validUntil is close and no renewal has moved it

	// The obtain's and the release's commands are built in args: go-redis
	// writes a *string or *int64 argument as the value it points to, and a
	// pointer goes into an interface without an allocation where a string
	// or an int64 is copied to the heap. One command at a time uses args:
	// the obtain's SET (attempts follow each other), then once the lease is
	// returned its release (a lease is released once). Issue 28: the lock
	// path's allocations.
	keyArr [2]string // the key, and the fence key when fencing
	value  string    // the value the obtain's SET writes
	ttlMs  int64     // the obtain's TTL in milliseconds
	args   [7]any    // SET key value NX PX ttl [GET], then EVALSHA release.lua 1 key head
}

// Key returns the lock key.
func (l *Lease) Key() string { return l.key }

// Owner returns the owner identity stored with the lock.
func (l *Lease) Owner() string { return l.owner }

// ID returns the public lease id: stable for this hold, carried by events,
// never the secret token.
func (l *Lease) ID() string { return headLease(l.head) }

// Fence returns the fencing token, 0 unless ObtainOptions.Fencing was set.
// Pass it with every write to the protected resource; the resource rejects
// writes carrying a fence lower than the highest it has seen.
func (l *Lease) Fence() int64 { return l.fence }

// Since returns when the lock was obtained.
func (l *Lease) Since() time.Time { return l.since }

// Degraded reports whether this is a process-local lease taken while Redis
// was unreachable (Options.Degraded).
func (l *Lease) Degraded() bool { return l.degraded }

// Context returns a context cancelled the moment the lock is known lost
// (renewal or Refresh found it gone or taken, its TTL lapsed without renewal,
// MaxHold was reached) and on Release. context.Cause tells which.
func (l *Lease) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.initContext()
	}
	return l.ctx
}

type leaseKey struct{}

// FromContext returns the lease whose Context ctx is (or derives from), for
// instance inside the function run by Do, which receives only the context:
//
//	err := client.Do(ctx, key, ttl, &lock.ObtainOptions{Fencing: true}, func(ctx context.Context) error {
//		lease, _ := lock.FromContext(ctx)
//		return store.Write(ctx, lease.Fence(), data)
//	})
func FromContext(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	return l, ok
}

// Done returns a channel closed when Context is cancelled.
func (l *Lease) Done() <-chan struct{} { return l.Context().Done() }

// Err returns nil while the lease holds the lock, an error matching ErrLost
// once the lock is known lost, and ErrNotHeld after Release.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkExpiry(time.Now())
	return l.err
}

// initContext creates the lease context on first use, so that leases nobody
// watches cost neither a context nor a timer. l.mu is held.
func (l *Lease) initContext() {
	p := l.parent
	if l.detach {
		p = context.WithoutCancel(p)
	}
	l.parent = nil
	l.ctx, l.cancel = context.WithCancelCause(context.WithValue(p, leaseKey{}, l))
	l.checkExpiry(time.Now())
	switch {
	case l.state != stateHeld:
		l.cancel(l.err)
	case !l.autoRenew:
		l.expiry = time.AfterFunc(time.Until(l.validUntil), l.onExpiry)
	}
}

func (l *Lease) onExpiry() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == stateHeld && l.expiry != nil {
		if !l.checkExpiry(time.Now()) {
			l.expiry.Reset(time.Until(l.validUntil))
		}
	}
}

// checkExpiry marks a lease without renewal lost once its TTL has surely
// lapsed. No event: the expiry is Redis's to report (event.Expired, from the
// collector). l.mu is held.
func (l *Lease) checkExpiry(now time.Time) bool {
	if l.state == stateHeld && !l.autoRenew && !now.Before(l.validUntil) {
		l.markLost("expired")
		return true
	}
	return false
}

// markLost moves a held lease to lost. l.mu is held.
func (l *Lease) markLost(reason string) {
	l.state = stateLost
	l.err = &lostError{reason: reason}
	l.end()
}

// end stops what runs on behalf of the lease. l.mu is held.
func (l *Lease) end() {
	if l.cancel != nil {
		l.cancel(l.err)
	}
	if l.expiry != nil {
		l.expiry.Stop()
	}
	if l.warn != nil {
		l.warn.Stop()
	}
	if l.stop != nil {
		close(l.stop)
		l.stop = nil
	}
	if l.listens {
		l.c.listen.remove(l)
	}
}

// lose records that the lock is gone (reason not_owner, max_hold or error).
// The event is recorded before the lease context is cancelled, so whoever
// wakes on Done finds it already recorded.
func (l *Lease) lose(reason string) {
	l.mu.Lock()
	if l.state != stateHeld {
		l.mu.Unlock()
		return
	}
	l.state = stateLost
	l.err = &lostError{reason: reason}
	l.mu.Unlock()
	if l.c.rec != nil {
		e := l.event(event.Lost)
		e.Reason = reason
		e.Hold = time.Unix(0, e.TS).Sub(l.since)
		l.c.record(e)
	}
	l.mu.Lock()
	l.end()
	l.mu.Unlock()
}

func (l *Lease) event(t event.Type) event.Event {
	return event.Event{Type: t, Key: l.key, Owner: l.owner, Lease: l.ID(), TS: time.Now().UnixNano(),
		Fence: l.fence, Degraded: l.degraded, TraceID: l.trace, SpanID: l.span}
}

// TTL returns the remaining TTL read from Redis (-1 if the key has no
// expiry). If the key is gone or held by another owner the lease is lost and
// TTL returns an error matching ErrLost.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if err := l.heldErr(); err != nil {
		return 0, err
	}
	var ms int64
	if l.degraded {
		d := l.c.local.pttl(l.key, headToken(l.head))
		if d >= 0 {
			return d, nil
		}
		ms = -3
	} else {
		var err error
		if ms, err = l.c.batch.run(ctx, pttlScript, l.keyArr[:1], l.headArg).Int64(); err != nil {
			return 0, err
		}
	}
	if ms == -3 {
		l.lose(event.ReasonNotOwner)
		return 0, l.Err()
	}
	if ms < 0 {
		return -1, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func (l *Lease) heldErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkExpiry(time.Now())
	if l.state != stateHeld {
		return l.err
	}
	return nil
}

// Refresh sets the lock's TTL to ttl if the lease still holds it (an
// owner-checked script: never GET then EXPIRE). If the key is gone or held by
// another owner, the lease is lost and Refresh returns an error matching
// ErrLost; after Release it returns ErrNotHeld.
func (l *Lease) Refresh(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return errTTL
	}
	if err := l.heldErr(); err != nil {
		return err
	}
	at := time.Now()
	ok, err := l.refresh(ctx, ttl)
	if err != nil {
		if l.c.rec != nil {
			e := l.event(event.RenewFailed)
			e.Reason = event.ReasonError
			l.c.record(e)
		}
		return err
	}
	if !ok {
		l.lose(event.ReasonNotOwner)
		return l.Err()
	}
	l.renewed(at, time.Now(), ttl)
	return nil
}

func (l *Lease) refresh(ctx context.Context, ttl time.Duration) (bool, error) {
	if l.degraded {
		return l.c.local.refresh(l.key, headToken(l.head), ttl), nil
	}
	n, err := l.c.batch.run(ctx, refreshScript, l.keyArr[:1], l.headArg, int64((ttl+time.Millisecond-1)/time.Millisecond)).Int64()
	return n == 1, err
}

// renewed records a successful refresh sent at at, whose reply came at
// reply, and the headroom it had: the TTL left when it landed.
//
// The conservative figure is what matters, by the local monotonic clock:
// the key's expiry was set when the previous write landed, no earlier than
// it was sent, so it lies at or after validUntil (that send + its TTL); this
// refresh landed at the latest when its reply came. validUntil - reply is
// therefore at most what was left. A renewal that succeeded with nothing
// provably left (a round trip longer than the headroom) reports 1ns, the
// least headroom the wire can carry (0 means unknown).
func (l *Lease) renewed(at, reply time.Time, ttl time.Duration) {
	l.mu.Lock()
	headroom := max(l.validUntil.Sub(reply), time.Nanosecond)
	if l.state == stateHeld {
		l.ttl = ttl
		l.validUntil = at.Add(ttl)
		l.headroom = headroom
		if l.expiry != nil {
			l.expiry.Reset(time.Until(l.validUntil))
		}
		l.armWarn()
	}
	l.mu.Unlock()
	if l.c.rec != nil {
		e := l.event(event.Renewed)
		e.TTL = ttl
		e.Headroom = headroom
		l.c.record(e)
	}
}

// Headroom returns the TTL that was left when the last renewal (automatic
// or Refresh) landed, measured conservatively by the local clock (from
// when the previous write was sent to when this one's reply came); 0 before
// the first renewal. It is the figure the renewal's event carries
// and lockscope_renewal_headroom_seconds observes: a lease renewed every
// ttl/3 normally lands with about two thirds of its TTL left; much less
// means the renewal ran late (GC pauses, CPU starvation, a slow Redis).
func (l *Lease) Headroom() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.headroom
}

// DefaultAtRiskBelow is ObtainOptions.AtRiskBelow's default: a quarter of
// the TTL.
const DefaultAtRiskBelow = 0.25

// riskBelow is the headroom under which the lease is at risk, for the TTL
// last set. l.mu is held.
func (l *Lease) riskBelow() time.Duration { return time.Duration(float64(l.ttl) * l.riskFrac) }

// armWarn (re)starts the timer that calls atRisk when validUntil comes
// within riskBelow and no renewal has moved it. l.mu is held.
func (l *Lease) armWarn() {
	if l.atRisk == nil || l.state != stateHeld {
		return
	}
	d := time.Until(l.validUntil.Add(-l.riskBelow()))
	if l.warn == nil {
		l.warn = time.AfterFunc(d, l.onWarn)
		return
	}
	l.warn.Reset(d)
}

func (l *Lease) onWarn() {
	l.mu.Lock()
	now := time.Now()
	left := l.validUntil.Sub(now)
	below := l.riskBelow()
	fire := l.state == stateHeld && left <= below && left > 0
	if l.state == stateHeld && left > below {
		// A renewal moved validUntil after this timer fired.
		l.warn.Reset(left - below)
	}
	l.mu.Unlock()
	if fire {
		l.atRisk(l, left)
	}
}

// Release deletes the lock if the lease still holds it, stops its renewal
// and cancels its context. If the key is gone or held by another owner it
// changes nothing and returns ErrNotHeld. If Redis cannot be reached the
// error is returned and the lock expires at its TTL.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.state == stateReleased {
		l.mu.Unlock()
		return ErrNotHeld
	}
	l.state = stateReleased
	if l.err == nil {
		l.err = ErrNotHeld
	}
	l.end()
	l.mu.Unlock()

	var ok bool
	if l.degraded {
		ok = l.c.local.release(l.key, headToken(l.head))
	} else {
		l.args = [...]any{"evalsha", releaseScript.sha, 1, &l.key, l.headArg, nil, nil}
		n, err := l.c.batch.runCmd(ctx, releaseScript, scriptCmd(l.args[:5]), nil).Int64()
		if err != nil {
			return err
		}
		ok = n == 1
	}
	if l.c.rec != nil {
		e := l.event(event.Released)
		e.Hold = time.Unix(0, e.TS).Sub(l.since)
		if !ok {
			e.Reason = event.ReasonNotOwner
		}
		l.c.record(e)
	}
	if !ok {
		return ErrNotHeld
	}
	return nil
}

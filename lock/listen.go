package lock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
)

// Hearing release requests: the holder's side of "ask before force".
//
// A lease that listens (ReleaseRequested was called) subscribes its own
// channel, event.RequestChannel(lease id), on the one Pub/Sub connection its
// Client keeps while any of its leases listens, and for listenLinger after
// the last one ended (so that an application holding one lock after
// another does not dial a connection per hold). The connection, and the
// goroutine that reads it, exist only then: a Client none of whose leases
// listens costs nothing, and Obtain and Release do not change (Release's
// only extra step is a nil check). Subscribing and unsubscribing happen on
// that goroutine, never on the caller's path.
//
// Classic Pub/Sub, not sharded: a Cluster forwards every PUBLISH to every
// node, so one connection (to whichever node the client picks) hears the
// channels of all its leases, whatever their slot; Sentinel and a single
// node work alike; and a Python holder on Debian's redis-py 4.3 (no
// SSUBSCRIBE) hears the same channel. See docs/events.md.

// ReleaseRequest is an operator's request that a lease's holder release the
// lock: from the dashboard's "Ask to release", `lockscope release KEY
// --ask`, or Client.RequestRelease.
type ReleaseRequest struct {
	Operator string        // who asks
	Reason   string        // why
	At       time.Time     // when the operator asked
	Grace    time.Duration // how long the operator waits before it may force the release; 0: not said
}

// ReleaseRequested returns a channel that receives the release requests
// operators send this hold, within moments of their sending (Redis Pub/Sub:
// not at the next renewal), whatever the TTL. The application decides what
// to do: finish or save its work and Release, or ignore the request. The
// first call makes the hold listen; the lease stops listening when it is
// released or lost. The channel is never closed: select on Done too.
//
// The channel holds one request: while one waits unread, later ones are
// dropped (the operator is asking the same thing again). A lease that has
// ended, or a degraded one (Options.Degraded, Redis unreachable), gets a
// nil channel, which never receives.
//
// Listening takes a moment to reach Redis (a SUBSCRIBE on the Client's
// Pub/Sub connection): until it has, and while that connection is being
// re-established after a failure, operators see the holder as one that
// cannot hear (Client.Listeners is 0), and a request sent then is not
// delivered (it is on the record, as unheard). Pub/Sub queues nothing.
func (l *Lease) ReleaseRequested() <-chan ReleaseRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkExpiry(time.Now())
	if l.state != stateHeld || l.degraded {
		return nil
	}
	l.listens = true
	return l.c.listen.add(l)
}

// listener is a Client's Pub/Sub side: the leases that listen, by
// channel, and the connection that hears them.
//
// Memory: one map entry per listening lease (the application's own holds,
// each removed when its hold ends) and one buffered request per lease.
// The channels live here rather than in the Lease, which a field more
// would move to a larger size class for every hold.
type listener struct {
	rdb    redis.UniversalClient
	linger time.Duration // listenLinger (tests shorten it, under mu)
	mu     sync.Mutex
	leases map[string]*listening // by channel
	ps     *redis.PubSub         // nil while no goroutine runs
	wake   chan struct{}         // the set of leases changed (cap 1)
}

// listening is one lease that listens, and its requests.
type listening struct {
	l    *Lease
	asks chan ReleaseRequest
}

// subscribeTimeout bounds one SUBSCRIBE or UNSUBSCRIBE write: a Redis that
// does not take it leaves the channel in go-redis's list, subscribed again
// when the connection is.
const subscribeTimeout = 5 * time.Second

// listenLinger is how long a Client keeps its Pub/Sub connection after its
// last listening lease ended.
const listenLinger = 30 * time.Second

// add makes l listen, starting the connection's goroutine if none runs,
// and returns its requests' channel (the same one for every call). l.mu is
// held (lease before listener: run never takes a lease's mutex).
func (s *listener) add(l *Lease) chan ReleaseRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := event.RequestChannel(l.ID())
	if e, ok := s.leases[ch]; ok && e.l == l {
		return e.asks
	}
	if s.leases == nil {
		s.leases = make(map[string]*listening)
	}
	e := &listening{l: l, asks: make(chan ReleaseRequest, 1)}
	s.leases[ch] = e
	if s.ps == nil {
		s.ps = s.rdb.Subscribe(context.Background())
		s.wake = make(chan struct{}, 1)
		go s.run(s.ps, s.wake)
	}
	s.signal()
	return e.asks
}

// remove stops l listening. l.mu is held.
func (s *listener) remove(l *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := event.RequestChannel(l.ID())
	if e, ok := s.leases[ch]; ok && e.l == l {
		delete(s.leases, ch)
		s.signal()
	}
}

// signal wakes the goroutine. s.mu is held.
func (s *listener) signal() {
	if s.wake == nil {
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run keeps ps subscribed to the channels of the listening leases and
// delivers what arrives, until none has listened for s.linger: then it
// closes ps and ends.
func (s *listener) run(ps *redis.PubSub, wake <-chan struct{}) {
	subscribed := map[string]bool{}
	var msgs <-chan *redis.Message
	var idle *time.Timer
	var idleC <-chan time.Time
	for {
		switch empty := s.sync(ps, subscribed); {
		case empty && idle == nil:
			s.mu.Lock()
			linger := s.linger
			s.mu.Unlock()
			idle = time.NewTimer(linger)
			idleC = idle.C
		case !empty && idle != nil:
			idle.Stop()
			idle, idleC = nil, nil
		}
		if msgs == nil && len(subscribed) > 0 {
			// After the first SUBSCRIBE: go-redis's receiver then has a
			// connection to read, which it re-dials (and resubscribes)
			// when it breaks.
			msgs = ps.Channel(redis.WithChannelSize(16))
		}
		select {
		case <-wake:
		case m := <-msgs:
			s.deliver(m)
		case <-idleC:
			if s.stopIdle(ps) {
				return
			}
			idle, idleC = nil, nil
		}
	}
}

// stopIdle closes ps and reports true if still no lease listens.
func (s *listener) stopIdle(ps *redis.PubSub) bool {
	s.mu.Lock()
	if len(s.leases) > 0 {
		s.mu.Unlock()
		return false
	}
	s.ps, s.wake = nil, nil
	s.mu.Unlock()
	ps.Close()
	return true
}

// sync subscribes the channels of leases that began to listen and
// unsubscribes those of leases that ended; it reports whether no lease
// listens now.
func (s *listener) sync(ps *redis.PubSub, subscribed map[string]bool) bool {
	var add, drop []string
	s.mu.Lock()
	empty := len(s.leases) == 0
	for ch := range s.leases {
		if !subscribed[ch] {
			add = append(add, ch)
			subscribed[ch] = true
		}
	}
	for ch := range subscribed {
		if _, ok := s.leases[ch]; !ok {
			drop = append(drop, ch)
			delete(subscribed, ch)
		}
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	defer cancel()
	// An error leaves the channels in go-redis's list: they are subscribed
	// again with the connection, and until then nobody hears them, which
	// Listeners shows.
	if len(add) > 0 {
		_ = ps.Subscribe(ctx, add...)
	}
	if len(drop) > 0 {
		_ = ps.Unsubscribe(ctx, drop...)
	}
	return empty
}

// deliver hands a request to the lease whose channel it came on, unless
// it is malformed or names another lease.
func (s *listener) deliver(m *redis.Message) {
	if m == nil {
		return // the channel closed: only with ps, after run ends
	}
	r, err := event.DecodeRequest([]byte(m.Payload))
	if err != nil {
		return
	}
	s.mu.Lock()
	e := s.leases[m.Channel]
	s.mu.Unlock()
	if e == nil || r.Lease != e.l.ID() {
		return
	}
	req := ReleaseRequest{Operator: r.By, Reason: r.Reason, At: time.Unix(0, r.TS), Grace: r.Grace}
	select {
	case e.asks <- req:
	default: // one waits unread already
	}
}

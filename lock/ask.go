package lock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
)

// Asking a holder to release: the operator's side of "ask before force"
// (listen.go is the holder's).

// ErrCannotHear: the holder's value is not lockscope's (another library's
// lock), so it has no channel to hear a release request on; nothing was
// sent.
var ErrCannotHear = errors.New("lock: the holder cannot hear release requests")

// flusher is what an Emitter offers besides Record: RequestRelease writes
// the requested event before it publishes.
type flusher interface {
	Flush(ctx context.Context) error
}

// Listeners returns how many connections listen for h's release requests
// now: subscribers of its lease's channel, counted on every node of a
// Cluster. 0 for another library's lock (it cannot hear) and for a
// lockscope holder that does not listen (it never called
// Lease.ReleaseRequested, or runs a library older than it, or its
// connection is down).
//
// Why a subscriber count and not a mark in the lock's value: the count is
// Redis's own record of a live connection, so it is true the moment a
// holder starts or stops listening and vanishes with a process that died,
// where a mark would outlive both; and the value's format, which other
// clients write, stays as it is.
func (c *Client) Listeners(ctx context.Context, h *Holder) (int64, error) {
	if h == nil || h.Foreign || h.Lease == "" {
		return 0, nil
	}
	return c.numSub(ctx, event.RequestChannel(h.Lease))
}

// numSub counts ch's subscribers: in a Cluster on every node (a classic
// PUBLISH reaches them all, but PUBSUB NUMSUB answers for its own node).
func (c *Client) numSub(ctx context.Context, ch string) (int64, error) {
	cl, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		m, err := c.rdb.PubSubNumSub(ctx, ch).Result()
		return m[ch], err
	}
	var mu sync.Mutex
	var n int64
	err := cl.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		m, err := node.PubSubNumSub(ctx, ch).Result()
		mu.Lock()
		n += m[ch]
		mu.Unlock()
		return err
	})
	return n, err
}

// RequestRelease asks the holder of key to release it, only if key still
// holds the value whose fingerprint the operator saw (Holder.Fingerprint):
// release what you saw, asked politely. It returns the holder asked and
// how many listeners the request reached (0: nobody heard it, the holder
// does not listen; see Listeners).
//
// The request goes to the channel of the hold the operator saw, named by
// its lease: a holder that took the key since has another lease and is
// never sent it. If the key holds another value now it returns that holder
// and ErrOwnerChanged; if it holds none, ErrNotHeld; another library's
// value, ErrCannotHear: in those cases nothing is sent or recorded.
//
// A request is recorded as an event.Requested (the holder asked as Owner
// and Lease, r.Operator as By, r.Reason, r.Grace as Wait, the listeners
// subscribed when it was sent as Count), heard or not, before it is
// published: with an Emitter as the Recorder the event is flushed first,
// so that a collector reads the request before the holder's answer. r.At
// zero means now.
func (c *Client) RequestRelease(ctx context.Context, key, fingerprint string, r ReleaseRequest) (*Holder, int64, error) {
	h, err := c.Inspect(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	fp, _, _ := strings.Cut(fingerprint, "@")
	switch {
	case !strings.EqualFold(fp, strings.SplitN(h.Fingerprint, "@", 2)[0]):
		return h, 0, ErrOwnerChanged
	case h.Foreign || h.Lease == "":
		return h, 0, fmt.Errorf("%w: %s is another library's lock", ErrCannotHear, h.Owner)
	case r.Grace < 0:
		return h, 0, errors.New("lock: negative grace")
	}
	if r.At.IsZero() {
		r.At = time.Now()
	}
	ch := event.RequestChannel(h.Lease)
	listening, err := c.numSub(ctx, ch)
	if err != nil {
		return h, 0, err
	}
	if c.rec != nil {
		e := event.Event{Type: event.Requested, Key: key, Owner: h.Owner, Lease: h.Lease, TS: r.At.UnixNano(),
			Fence: h.Fence, By: r.Operator, Reason: r.Reason, Wait: r.Grace, Count: listening}
		e.TraceID, e.SpanID = c.traceOf(ctx)
		c.record(e)
		if f, ok := c.rec.(flusher); ok {
			// A failed flush leaves the event buffered, written later:
			// the request still goes out.
			_ = f.Flush(ctx)
		}
	}
	msg := event.Request{Lease: h.Lease, By: r.Operator, Reason: r.Reason, TS: r.At.UnixNano(), Grace: r.Grace}
	n, err := c.rdb.Publish(ctx, ch, msg.Encode()).Result()
	if err != nil {
		return h, 0, err
	}
	if _, ok := c.rdb.(*redis.ClusterClient); ok {
		// PUBLISH counted the receivers of its own node only; the
		// message reaches every node's.
		n = max(n, listening)
	}
	return h, n, nil
}

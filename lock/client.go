package lock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/redis/go-redis/v9"
)

// Options configures a Client. A nil *Options is the zero value.
type Options struct {
	// Owner is the identity stored with every lock and carried by its events;
	// "" means "<app>/<host>/<pid>".
	Owner string
	// Recorder receives lifecycle events; nil means no events, at no cost.
	Recorder Recorder
	// Degraded turns on the process-local fallback used while Redis is
	// unreachable; off by default. See the package documentation for the
	// risk.
	Degraded bool
	// TraceContext returns the trace and span the caller's context carries
	// (extra/lockotel reads an OpenTelemetry span), so that a lock's events
	// name the trace that waited for it and the trace that held it. nil
	// means no ids, at no cost. It is called on the lock path, once per
	// Obtain, Try, Do or ForceRelease and only when Recorder is set: it must
	// be quick and must not block. Zero ids mean none.
	//
	// Every event of an obtain (waiting, acquired, failed) carries the ids
	// of the obtain's ctx, and so does every event of the hold it returns
	// (renewed, renew_failed, released, lost), whatever the context passed
	// to Refresh or Release or the function Do runs: a hold belongs to the
	// trace that obtained it. A forced event carries the ids of the
	// ForceRelease call's ctx (the operator's request).
	TraceContext func(ctx context.Context) (event.TraceID, event.SpanID)
}

// Client takes locks in one Redis deployment. It is safe for concurrent use.
type Client struct {
	rdb   redis.UniversalClient
	owner string
	rec   Recorder
	batch *batcher
	local *localLocks                                         // nil unless Options.Degraded
	trace func(context.Context) (event.TraceID, event.SpanID) // nil unless Options.TraceContext and Recorder

	listen listener // the leases that hear release requests (listen.go)
}

// New returns a Client using rdb, which may be a single-node, Sentinel
// (failover) or Cluster client. opt may be nil.
func New(rdb redis.UniversalClient, opt *Options) *Client {
	if opt == nil {
		opt = &Options{}
	}
	c := &Client{rdb: rdb, owner: opt.Owner, rec: opt.Recorder, batch: newBatcher(rdb)}
	c.listen.rdb, c.listen.linger = rdb, listenLinger
	if c.owner == "" {
		c.owner = DefaultOwner()
	}
	if opt.Degraded {
		c.local = newLocalLocks()
	}
	if c.rec != nil {
		c.trace = opt.TraceContext // ids go into events only
	}
	return c
}

// traceOf returns the ids ctx carries, through Options.TraceContext; zero
// without a hook (or a recorder).
func (c *Client) traceOf(ctx context.Context) (event.TraceID, event.SpanID) {
	if c.trace == nil {
		return event.TraceID{}, event.SpanID{}
	}
	return c.trace(ctx)
}

// DefaultOwner returns "<app>/<host>/<pid>", the owner used when none is set.
func DefaultOwner() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown"
	}
	return filepath.Base(os.Args[0]) + "/" + host + "/" + strconv.Itoa(os.Getpid())
}

// record sends e to the recorder, stamping the time. The caller checks
// c.rec != nil first so that no event is built when nobody listens.
func (c *Client) record(e event.Event) {
	if e.TS == 0 {
		e.TS = time.Now().UnixNano()
	}
	c.rec.Record(e)
}

// Inspect returns the current holder of key, read from Redis in one step, or
// ErrNotHeld if the key does not exist. Values written by other libraries
// come back with Foreign set and the raw value as Owner. With degraded mode
// on and Redis unreachable, it reports this process's local lock.
func (c *Client) Inspect(ctx context.Context, key string) (*Holder, error) {
	res, err := c.batch.run(ctx, inspectScript, []string{key}).Slice()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return nil, ErrNotHeld
		}
		if c.local != nil && unreachable(err) {
			if h := c.local.holder(key); h != nil {
				return h, nil
			}
		}
		return nil, err
	}
	if len(res) != 3 {
		return nil, errors.New("lock: unexpected reply from inspect script")
	}
	v, pttl, err := valuePTTL(res[:2])
	if err != nil {
		return nil, err
	}
	at, _ := res[2].(int64)
	return newHolder(key, v, pttl, at), nil
}

// ForceRelease deletes key only if its value still has the given
// fingerprint (Holder.Fingerprint, as seen by the operator), in one Lua
// script. It returns the holder it removed. If the key now holds another
// value it returns that holder and ErrOwnerChanged and touches nothing; if
// the key does not exist, ErrNotHeld. A successful release is recorded as an
// event.Forced with the previous holder as Owner and the operator as By.
//
// A holder whose value may not tell it from a successor (Holder.Ambiguous:
// a constant such as "1", or any other value but a known library's random
// token) has Holder.Fingerprint "<sha1>@<expiry>" when the key
// has a TTL: a renewal or a successor moves the expiry, so the release is
// refused (ErrOwnerChanged) rather than hitting a newer holder. Without a TTL
// (or before Redis 7, which lacks PEXPIRETIME) nothing tells them apart: a
// plain fingerprint of such a value returns ErrAmbiguous (so does one
// without the "@<expiry>" shown) and changes nothing; "<sha1>@any" releases
// whoever holds that value.
func (c *Client) ForceRelease(ctx context.Context, key, fingerprint, by, reason string) (*Holder, error) {
	if !strings.Contains(fingerprint, "@") {
		h, err := c.Inspect(ctx, key)
		if err != nil {
			return nil, err
		}
		if h.Ambiguous && strings.HasPrefix(h.Fingerprint, fingerprint) {
			return h, ErrAmbiguous
		}
	}
	res, err := c.batch.run(ctx, forceScript, []string{key}, fingerprint).Slice()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return nil, ErrNotHeld
		}
		return nil, err
	}
	if len(res) != 4 {
		return nil, errors.New("lock: unexpected reply from force script")
	}
	v, pttl, err := valuePTTL(res[1:3])
	if err != nil {
		return nil, err
	}
	at, _ := res[3].(int64)
	h := newHolder(key, v, pttl, at)
	if n, _ := res[0].(int64); n != 1 {
		return h, ErrOwnerChanged
	}
	if c.rec != nil {
		now := time.Now()
		var hold time.Duration
		if !h.Since.IsZero() {
			hold = now.Sub(h.Since)
		}
		e := event.Event{Type: event.Forced, Key: key, Owner: h.Owner, Lease: h.Lease,
			TS: now.UnixNano(), Hold: hold, Fence: h.Fence, By: by, Reason: reason}
		e.TraceID, e.SpanID = c.traceOf(ctx)
		c.record(e)
	}
	return h, nil
}

func valuePTTL(res []any) (string, int64, error) {
	if len(res) != 2 {
		return "", 0, errors.New("lock: unexpected reply from Redis")
	}
	v, ok1 := res[0].(string)
	pttl, ok2 := res[1].(int64)
	if !ok1 || !ok2 {
		return "", 0, errors.New("lock: unexpected reply from Redis")
	}
	return v, pttl, nil
}

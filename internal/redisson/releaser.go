package redisson

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
	"github.com/redis/go-redis/v9"
)

//go:embed force.lua
var forceLua string

var forceScript = redis.NewScript(forceLua)

// Releaser inspects and force-releases locks as lock.Client does, and
// Redisson's hash locks too: what the dashboard and the operator command
// line use.
type Releaser struct {
	lc  *lock.Client
	rdb redis.UniversalClient
	rec lock.Recorder // where forced releases of Redisson locks are recorded; nil: nowhere
}

// NewReleaser returns a Releaser for rdb: string locks go to lc, Redisson
// locks are read and released here, their forced releases recorded in rec
// (nil: none), as lc records those of string locks.
func NewReleaser(lc *lock.Client, rdb redis.UniversalClient, rec lock.Recorder) *Releaser {
	return &Releaser{lc: lc, rdb: rdb, rec: rec}
}

// Inspect returns key's holder: lock.Client.Inspect's for a string, or
// for a Redisson lock's hash a foreign holder named by Lock.Owner, whose
// Value is Lock.Describe (client ids shortened, reentrancy counts) and
// whose Fingerprint is the hash's. Any other hash is no lock
// (lock.ErrNotHeld).
func (r *Releaser) Inspect(ctx context.Context, key string) (*lock.Holder, error) {
	h, err := r.lc.Inspect(ctx, key)
	if !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return h, err
	}
	pipe := r.rdb.Pipeline()
	all := pipe.HGetAll(ctx, key)
	pttl := pipe.PTTL(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			return nil, lock.ErrNotHeld // neither a string nor a hash
		}
		return nil, err
	}
	fields := all.Val()
	l, ok := Parse(fields)
	if !ok {
		return nil, lock.ErrNotHeld
	}
	return holder(key, l, Fingerprint(fields), pttl.Val()), nil
}

func holder(key string, l Lock, fp string, pttl time.Duration) *lock.Holder {
	h := &lock.Holder{Key: key, Owner: l.Owner(), Fingerprint: fp, Foreign: true, Value: l.Describe(), TTL: -1}
	if pttl >= 0 {
		h.TTL = pttl
	}
	return h
}

// ForceRelease deletes key only if it still holds what the operator saw:
// lock.Client.ForceRelease for a string; for a Redisson lock, one script
// (force.lua) compares the hash's content with fingerprint, deletes it and
// publishes Redisson's unlock message, so that its waiters try again at
// once. It returns the holder it removed, or the one it found instead with
// lock.ErrOwnerChanged (nothing changed), or lock.ErrNotHeld. A release is
// recorded as an event.Forced of the holder's name.
func (r *Releaser) ForceRelease(ctx context.Context, key, fingerprint, by, reason string) (*lock.Holder, error) {
	fp, _, _ := strings.Cut(fingerprint, "@")
	t, err := r.rdb.Type(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	if t != "hash" {
		return r.lc.ForceRelease(ctx, key, fingerprint, by, reason)
	}
	keys := []string{key, QueueKey(key), TimeoutKey(key)}
	res, err := forceScript.Run(ctx, r.rdb, keys, fp, Channel(key), RWChannel(key), strconv.FormatInt(time.Now().UnixMilli(), 10)).Slice()
	if errors.Is(err, redis.Nil) {
		return nil, lock.ErrNotHeld
	}
	if err != nil {
		return nil, err
	}
	if len(res) != 3 {
		return nil, errors.New("redisson: unexpected reply from the force script")
	}
	ok, _ := res[0].(int64)
	content, _ := res[1].(string)
	pttl, _ := res[2].(int64)
	fields := parseCanonical(content)
	l, isLock := Parse(fields)
	if !isLock {
		return nil, lock.ErrNotHeld
	}
	h := holder(key, l, Fingerprint(fields), time.Duration(pttl)*time.Millisecond)
	if ok != 1 {
		return h, lock.ErrOwnerChanged
	}
	if r.rec != nil {
		r.rec.Record(event.Event{Type: event.Forced, Key: key, Owner: h.Owner, TS: time.Now().UnixNano(), By: by, Reason: reason})
	}
	return h, nil
}

// parseCanonical reads Canonical's format back.
func parseCanonical(s string) map[string]string {
	out := make(map[string]string)
	parts := strings.Split(s, "\n")
	for i := 0; i+1 < len(parts); i += 2 {
		out[parts[i]] = parts[i+1]
	}
	return out
}

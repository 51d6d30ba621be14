package redisson

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
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

// AnyLockClient inspects and force-releases locks as lock.Client does, and
// Redisson's hash locks too: what the dashboard and the operator command
// line use.
type AnyLockClient struct {
	lc  *lock.Client
	rdb redis.UniversalClient
	rec lock.Recorder // where forced releases of Redisson locks are recorded; nil: nowhere
}

// NewAnyLockClient returns an AnyLockClient for rdb: string locks go to lc, Redisson
// locks are read and released here, their forced releases recorded in rec
// (nil: none), as lc records those of string locks.
func NewAnyLockClient(lc *lock.Client, rdb redis.UniversalClient, rec lock.Recorder) *AnyLockClient {
	return &AnyLockClient{lc: lc, rdb: rdb, rec: rec}
}

// Inspect returns key's holder: lock.Client.Inspect's for a string, or
// for a Redisson lock's hash a foreign holder named by Lock.Owner, whose
// Value is Lock.Describe (client ids shortened, reentrancy counts) and
// whose Fingerprint is the hash's, with its expiry ("<sha1>@<PEXPIRETIME>"):
// the same thread's next hold writes the same content, so the hash is
// Ambiguous and only its expiry tells a successor apart. Any other hash is
// no lock (lock.ErrNotHeld).
func (r *AnyLockClient) Inspect(ctx context.Context, key string) (*lock.Holder, error) {
	h, err := r.lc.Inspect(ctx, key)
	if !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return h, err
	}
	h, _, err = r.readHash(ctx, key)
	return h, err
}

// readHash reads key's hash as a Redisson lock: its holder and content's
// fingerprint (without the expiry), or lock.ErrNotHeld for a hash that is
// no lock (or no hash).
func (r *AnyLockClient) readHash(ctx context.Context, key string) (*lock.Holder, string, error) {
	pipe := r.rdb.Pipeline()
	all := pipe.HGetAll(ctx, key)
	pttl := pipe.PTTL(ctx, key)
	at := pipe.PExpireTime(ctx, key) // Redis 7.0; before, an error: expiry unknown
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		if redis.HasErrorPrefix(all.Err(), "WRONGTYPE") {
			return nil, "", lock.ErrNotHeld // neither a string nor a hash
		}
		if all.Err() != nil {
			return nil, "", all.Err()
		}
		if pttl.Err() != nil {
			return nil, "", pttl.Err()
		}
	}
	fields := all.Val()
	l, ok := Parse(fields)
	if !ok {
		return nil, "", lock.ErrNotHeld
	}
	expireAt := int64(0)
	if at.Err() == nil {
		expireAt = at.Val().Milliseconds()
	}
	fp := Fingerprint(fields)
	return holder(key, l, fp, pttl.Val(), expireAt), fp, nil
}

func holder(key string, l Lock, fp string, pttl time.Duration, expireAt int64) *lock.Holder {
	h := &lock.Holder{Key: key, Owner: l.Owner(), Fingerprint: fp, Foreign: true, Ambiguous: true, Value: l.Describe(), TTL: -1, ExpireAt: expireAt}
	if pttl >= 0 {
		h.TTL = pttl
	}
	if expireAt > 0 {
		h.Fingerprint += "@" + strconv.FormatInt(expireAt, 10)
	}
	return h
}

// ErrSemaphore is ForceRelease's error for a key that Redis shows to be a
// Redisson semaphore's counter (its permits' set, or callers waiting on its
// channel): no lock, and deleting it would delete the semaphore.
var ErrSemaphore = errors.New("redisson: a semaphore's permit counter, not a lock: nothing released")

// ForceRelease deletes key only if it still holds what the operator saw:
// lock.Client.ForceRelease for a string (but never a Redisson semaphore's
// counter: ErrSemaphore); for a Redisson lock, once the hash read is that
// lock with that fingerprint, one script (force.lua) compares the hash's
// content and expiry with it again, deletes it and publishes Redisson's
// unlock message, so that its waiters try again at once. It returns the
// holder it removed, or the one it found instead with lock.ErrOwnerChanged
// (nothing changed), or lock.ErrNotHeld (a hash that is no lock is never
// touched), or lock.ErrAmbiguous for a fingerprint without expiry and not
// "@any". A release is recorded as an event.Forced of the holder's name.
func (r *AnyLockClient) ForceRelease(ctx context.Context, key, fingerprint, by, reason string) (*lock.Holder, error) {
	fp, want, _ := strings.Cut(fingerprint, "@")
	t, err := r.rdb.Type(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	switch t {
	case "string":
		if err := r.notSemaphore(ctx, key); err != nil {
			return nil, err
		}
		return r.lc.ForceRelease(ctx, key, fingerprint, by, reason)
	case "hash":
	default:
		return r.lc.ForceRelease(ctx, key, fingerprint, by, reason)
	}
	h, seen, err := r.readHash(ctx, key)
	if err != nil {
		return nil, err
	}
	if seen != fp {
		return h, lock.ErrOwnerChanged
	}
	if want == "" {
		return h, lock.ErrAmbiguous
	}
	keys := []string{key, QueueKey(key), TimeoutKey(key)}
	res, err := forceScript.Run(ctx, r.rdb, keys, fp, Channel(key), RWChannel(key), strconv.FormatInt(time.Now().UnixMilli(), 10), want).Slice()
	if errors.Is(err, redis.Nil) {
		return nil, lock.ErrNotHeld
	}
	if err != nil {
		return nil, err
	}
	if len(res) != 4 {
		return nil, errors.New("redisson: unexpected reply from the force script")
	}
	ok, _ := res[0].(int64)
	content, _ := res[1].(string)
	pttl, _ := res[2].(int64)
	at, _ := res[3].(int64)
	fields := parseCanonical(content)
	l, isLock := Parse(fields)
	if !isLock {
		return nil, lock.ErrNotHeld // changed since into a hash that is no lock: the script left it
	}
	h = holder(key, l, Fingerprint(fields), time.Duration(pttl)*time.Millisecond, at)
	if ok != 1 {
		return h, lock.ErrOwnerChanged
	}
	if r.rec != nil {
		r.rec.Record(event.Event{Type: event.Forced, Key: key, Owner: h.Owner, TS: time.Now().UnixNano(), By: by, Reason: reason})
	}
	return h, nil
}

// notSemaphore returns ErrSemaphore when key's string holds an integer and
// Redis shows a Redisson semaphore there (ReadSemaphore: its permits' set,
// or callers waiting on its channel), or the error that kept it from
// telling, else nil. A counter without either, or one the user may not
// read the parts of (an ACL without them: docs/acl.md), looks like any
// other integer value.
func (r *AnyLockClient) notSemaphore(ctx context.Context, key string) error {
	s, err := ReadSemaphore(ctx, r.rdb, key, time.Now())
	switch {
	case errors.Is(err, ErrNotSemaphore), redis.HasErrorPrefix(err, "NOPERM"):
		return nil // a user who may not read a semaphore's parts is not shown one
	case err != nil:
		return fmt.Errorf("redisson: cannot tell whether %q is a Redisson semaphore's counter, so nothing was released: %w", key, err)
	case s.Expirable || s.Waiters > 0:
		return ErrSemaphore
	}
	return nil
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

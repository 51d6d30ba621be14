package redisson

import (
	"context"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redisson's semaphores. Both keep, under the semaphore's name, a plain
// string counter of the permits available: RSemaphore's acquire is a DECRBY
// (in Lua, when enough are left), its release an INCRBY followed by PUBLISH
// of the new count on "redisson_sc:{<name>}", where the callers waiting for
// a permit are subscribed. Nothing in Redis records how many permits an
// RSemaphore was given, so how many are in use is not known.
//
// RPermitExpirableSemaphore adds "{<name>}:timeout", a sorted set of the
// permits acquired: each a 16-byte id (Redisson shows it in hex), scored by
// when it expires (unix ms; NoLease for a permit without a lease). A permit
// past its expiry is reclaimed by the next call that touches the
// semaphore; until then it is counted as available, as Redisson's
// availablePermits counts it.
//
// A counter is any number: that one is a semaphore is known only from who
// says so (the watch rule "PATTERN=semaphore"), never guessed.

// NoLease is the score of a permit acquired without a lease.
const NoLease = 922337203685477

// Semaphore is a Redisson semaphore as Redis holds it now.
type Semaphore struct {
	// Expirable is an RPermitExpirableSemaphore with permits acquired (its
	// timeout set exists); false for an RSemaphore, and for an expirable
	// one none of whose permits is acquired (the two look alike then).
	Expirable bool
	// Available is the permits available: the counter, plus an expirable
	// semaphore's permits past their expiry.
	Available int64
	// Used is the permits acquired and not expired; known (UsedKnown) for
	// an expirable semaphore only.
	Used      int64
	UsedKnown bool
	// Permits are an expirable semaphore's permits acquired, soonest to
	// expire first.
	Permits []Permit
	// Waiters is the clients subscribed to the semaphore's channel: waiting
	// for a permit (one per client, however many of its threads wait).
	Waiters int64
	// TTL is the counter's, if it has one (trySetPermits with a time to
	// live); 0 for none.
	TTL time.Duration
}

// Permit is one acquired permit of an expirable semaphore.
type Permit struct {
	ID      string    // hex, as Redisson names it
	Expires time.Time // zero: no lease
}

// SemaphoreChannel is where a semaphore's waiters are told of released
// permits.
func SemaphoreChannel(name string) string { return prefixName("redisson_sc", name) }

// SemaphoreTimeoutKey is an expirable semaphore's set of permits.
func SemaphoreTimeoutKey(name string) string {
	if strings.Contains(name, "{") {
		return name + ":timeout"
	}
	return "{" + name + "}:timeout"
}

// ErrNotSemaphore is ReadSemaphore's error for a key that holds no
// counter: missing, another type, or not an integer.
var ErrNotSemaphore = errors.New("not a semaphore: no integer counter under the key")

// ReadSemaphore reads semaphore name in one round trip of rdb, as of now.
func ReadSemaphore(ctx context.Context, rdb redis.UniversalClient, name string, now time.Time) (Semaphore, error) {
	pipe := rdb.Pipeline()
	get := pipe.Get(ctx, name)
	ttl := pipe.PTTL(ctx, name)
	permits := pipe.ZRangeWithScores(ctx, SemaphoreTimeoutKey(name), 0, -1)
	subs := pipe.PubSubNumSub(ctx, SemaphoreChannel(name))
	_, err := pipe.Exec(ctx)
	var rerr redis.Error
	if err != nil && !errors.Is(err, redis.Nil) && !errors.As(err, &rerr) {
		return Semaphore{}, err
	}
	v, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil) || redis.HasErrorPrefix(err, "WRONGTYPE"):
		return Semaphore{}, ErrNotSemaphore
	case err != nil:
		return Semaphore{}, err // NOPERM: the user may not read it
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return Semaphore{}, ErrNotSemaphore
	}
	if err := ttl.Err(); err != nil {
		return Semaphore{}, err
	}
	if err := subs.Err(); err != nil {
		return Semaphore{}, err
	}
	s := Semaphore{Available: n, Waiters: subs.Val()[SemaphoreChannel(name)]}
	if d := ttl.Val(); d > 0 {
		s.TTL = d
	}
	zs, err := permits.Result()
	if err != nil && !errors.Is(err, redis.Nil) && !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return Semaphore{}, err
	}
	if len(zs) > 0 {
		s.Expirable, s.UsedKnown = true, true
	}
	for _, z := range zs {
		m, _ := z.Member.(string)
		p := Permit{ID: hex.EncodeToString([]byte(m))}
		if z.Score < NoLease {
			p.Expires = time.UnixMilli(int64(z.Score))
			if !p.Expires.After(now) {
				s.Available++ // reclaimed by the next call
				continue
			}
		}
		s.Used++
		s.Permits = append(s.Permits, p)
	}
	return s, nil
}

// Kind names the semaphore's kind for the pages.
func (s Semaphore) Kind() string {
	if s.Expirable {
		return "permit-expirable semaphore"
	}
	return "semaphore"
}

package collector

import (
	"context"
	"errors"
	"time"

	"github.com/lockscope/lockscope/internal/redisson"
	"github.com/lockscope/lockscope/lock"
	"github.com/redis/go-redis/v9"
)

// reading is what a watched key held when the watcher read it: a string, or
// a hash (a Redisson lock, if it parses as one).
type reading struct {
	key    string
	value  string // the string; for a hash its content (redisson.Canonical)
	hash   bool
	rlock  redisson.Lock // hash parsed as a Redisson lock (rlockOK)
	rlkOK  bool
	pttl   time.Duration // negative: no TTL
	gone   bool          // no such key (or another type)
	sent   time.Time     // when the read was sent: PTTL counts from after it
	failed error         // the read failed (connection): nothing is known
}

// owner names the holder of what r holds.
func (r *reading) owner() string {
	if r.rlkOK {
		return r.rlock.Owner()
	}
	return lock.ForeignOwner(r.value)
}

// readKeys reads the values (strings, or Redisson hashes) and TTLs of keys
// on rdb: one round trip, and a second for the hashes among them.
func readKeys(ctx context.Context, rdb redis.UniversalClient, keys []string) []reading {
	out := make([]reading, len(keys))
	pipe := rdb.Pipeline()
	sent := time.Now()
	gets := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		gets[i] = pipe.Get(ctx, k)
		ttls[i] = pipe.PTTL(ctx, k)
	}
	_, err := pipe.Exec(ctx)
	var rerr redis.Error
	if err != nil && !errors.Is(err, redis.Nil) && !errors.As(err, &rerr) {
		for i := range out {
			out[i] = reading{key: keys[i], failed: err}
		}
		return out
	}
	var hashes []int
	for i, k := range keys {
		r := reading{key: k, sent: sent, pttl: ttls[i].Val()}
		v, err := gets[i].Result()
		switch {
		case err == nil:
			r.value = v
		case redis.HasErrorPrefix(err, "WRONGTYPE"):
			hashes = append(hashes, i)
		default:
			r.gone = true
		}
		out[i] = r
	}
	if len(hashes) == 0 {
		return out
	}
	pipe = rdb.Pipeline()
	sent = time.Now()
	all := make([]*redis.MapStringStringCmd, len(hashes))
	for j, i := range hashes {
		all[j] = pipe.HGetAll(ctx, keys[i])
		ttls[i] = pipe.PTTL(ctx, keys[i])
	}
	_, err = pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) && !errors.As(err, &rerr) {
		for _, i := range hashes {
			out[i].failed = err
		}
		return out
	}
	for j, i := range hashes {
		r := &out[i]
		fields, err := all[j].Result()
		if err != nil || len(fields) == 0 {
			r.gone = true // another type (a list, a set), or deleted meanwhile
			continue
		}
		r.hash, r.sent, r.pttl = true, sent, ttls[i].Val()
		r.value = redisson.Canonical(fields)
		r.rlock, r.rlkOK = redisson.Parse(fields)
	}
	return out
}

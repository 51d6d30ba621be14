package collector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockscope/lockscope/internal/ctxsleep"
	"github.com/redis/go-redis/v9"
)

// errDuplicateReplica reports a second process reading as the same replica.
var errDuplicateReplica = errors.New("collector: another process is reading as this replica")

// Presence: a live replica keeps PresenceKey(stream, replica) set to its own
// random id and the time, refreshed every presenceEvery. A process starting as
// a replica whose key was refreshed by another process within presenceStale
// waits for it to go stale (a killed predecessor stops refreshing); if it
// stays fresh, the second process refuses to read. The time of the last
// refresh is also when the previous incarnation stopped counting.
const (
	presenceEvery = 500 * time.Millisecond
	presenceStale = 2 * time.Second
	presenceTTL   = time.Hour
)

// presenceStopped replaces the id of a replica that stopped gracefully.
const presenceStopped = "stopped"

func (c *Follower) presenceValue() string {
	return c.instance + "|" + strconv.FormatInt(time.Now().UnixMilli(), 10)
}

func parsePresence(v string) (instance string, at time.Time, ok bool) {
	instance, ms, found := strings.Cut(v, "|")
	n, err := strconv.ParseInt(ms, 10, 64)
	return instance, time.UnixMilli(n), found && err == nil
}

// claimPresence takes the replica's presence key, waiting out a dead
// predecessor's; it returns when the predecessor was last alive (zero if
// unknown).
func (c *Follower) claimPresence(ctx context.Context) (time.Time, error) {
	key := PresenceKey(c.opt.Stream, c.opt.Replica)
	give := time.Now().Add(presenceStale + presenceEvery)
	for {
		v, err := c.rdb.Get(ctx, key).Result()
		var rerr redis.Error
		switch {
		case errors.As(err, &rerr) && !errors.Is(err, redis.Nil):
			c.log.Warn("cannot keep the replica's presence key: two processes started as the same replica would go unnoticed", "key", key, "fix", remedy(err, "+get +set on it"), "err", err)
			return time.Time{}, nil
		case err != nil && !errors.Is(err, redis.Nil):
			return time.Time{}, err
		}
		inst, at, ok := parsePresence(v)
		if !ok || inst == c.instance || inst == presenceStopped || time.Since(at) >= presenceStale {
			if err := c.rdb.Set(ctx, key, c.presenceValue(), presenceTTL).Err(); err != nil {
				return time.Time{}, err
			}
			if !ok {
				at = time.Time{}
			}
			return at, nil
		}
		if time.Now().After(give) {
			c.log.Error("another lockscope process is reading the stream as the same replica; each would see part of the events. Give every replica its own --replica name (default: hostname and listen port)",
				"replica", c.opt.Replica, "group", c.opt.Group)
			return time.Time{}, fmt.Errorf("%w %q (group %q)", errDuplicateReplica, c.opt.Replica, c.opt.Group)
		}
		if !ctxsleep.Sleep(ctx, presenceEvery/2) {
			return time.Time{}, ctx.Err()
		}
	}
}

// keepPresence refreshes the presence key until ctx ends, and once more on
// the way out (the time a graceful stop stopped counting).
func (c *Follower) keepPresence(ctx context.Context) {
	key := PresenceKey(c.opt.Stream, c.opt.Replica)
	warned := false
	refresh := func(ctx context.Context) {
		old, err := c.rdb.SetArgs(ctx, key, c.presenceValue(), redis.SetArgs{TTL: presenceTTL, Get: true}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return
		}
		if inst, _, ok := parsePresence(old); ok && inst != c.instance && !warned {
			warned = true
			c.log.Error("another lockscope process reads the stream as the same replica: each shows part of the events. Give every replica its own --replica name",
				"replica", c.opt.Replica)
		}
	}
	every(ctx, presenceEvery, func() { refresh(ctx) })
	// Stopped: the next start need not wait.
	dctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.rdb.Set(dctx, key, presenceStopped+"|"+strconv.FormatInt(time.Now().UnixMilli(), 10), presenceTTL)
}

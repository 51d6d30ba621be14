package redisson

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiting is who waits for a Redisson lock now, as Redis shows it.
type Waiting struct {
	// Queue is a fair lock's waiting threads, first first, each with the
	// time it gives up (unix ms in the timeout set).
	Queue []Queued
	// Subscribers is the number of clients subscribed to the lock's
	// channel (PUBSUB NUMSUB): a plain or read-write lock's waiters. One
	// client subscribes once per lock however many of its threads wait.
	Subscribers int64
}

// Queued is one waiter of a fair lock's queue.
type Queued struct {
	Field   string    // "<client id>:<thread>", the field it will hold the lock by
	Timeout time.Time // when it leaves the queue if it has not got the lock
}

// Owner names a queued waiter as Lock.Owner names a holder.
func (q Queued) Owner() string {
	h, ok := parseField(q.Field)
	if !ok {
		return "redisson waiter"
	}
	return "redisson " + h.short()
}

// ReadWaiting reads who waits for lock key (whose hash, if it exists now,
// is l; its mode tells which channel its waiters listen on), in one round
// trip of rdb, which must be the node holding key.
func ReadWaiting(ctx context.Context, rdb redis.UniversalClient, key, mode string) (Waiting, error) {
	ch := Channel(key)
	if mode != "" {
		ch = RWChannel(key)
	}
	pipe := rdb.Pipeline()
	queue := pipe.LRange(ctx, QueueKey(key), 0, -1)
	timeouts := pipe.ZRangeWithScores(ctx, TimeoutKey(key), 0, -1)
	subs := pipe.PubSubNumSub(ctx, ch)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Waiting{}, err
	}
	var w Waiting
	at := make(map[string]float64)
	for _, z := range timeouts.Val() {
		if m, ok := z.Member.(string); ok {
			at[m] = z.Score
		}
	}
	for _, f := range queue.Val() {
		q := Queued{Field: f}
		if ms, ok := at[f]; ok {
			q.Timeout = time.UnixMilli(int64(ms))
		}
		w.Queue = append(w.Queue, q)
	}
	w.Subscribers = subs.Val()[ch]
	return w, nil
}

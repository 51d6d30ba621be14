package lock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/eventrec"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// recorder is a Recorder that keeps every event.
// newClient returns a client of the shared server, its Redis client, a
// recorder receiving its events and a key prefix unique to the test.
func newClient(t *testing.T, owner string) (*Client, *redis.Client, *eventrec.Recorder, string) {
	t.Helper()
	rdb := redistest.Shared(t).Client(t)
	rec := &eventrec.Recorder{}
	return New(rdb, &Options{Owner: owner, Recorder: rec}), rdb, rec, redistest.KeyPrefix(t)
}

// mustObtain obtains key or fails the test.
func mustObtain(t *testing.T, c *Client, key string, ttl time.Duration, opt *ObtainOptions) *Lease {
	t.Helper()
	l, err := c.Obtain(context.Background(), key, ttl, opt)
	if err != nil {
		t.Fatalf("Obtain(%q) = %v, want a lease", key, err)
	}
	return l
}

// keyState returns a key's value and PTTL.
func keyState(t *testing.T, rdb redis.UniversalClient, key string) (string, time.Duration) {
	t.Helper()
	ctx := context.Background()
	v, err := rdb.Get(ctx, key).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return v, rdb.PTTL(ctx, key).Val()
}

// waitClosed reports whether ch closes within d.
func waitClosed(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// streamEvents reads every event of stream back, decoded.
func streamEvents(t *testing.T, rdb redis.UniversalClient, stream string) []event.Event {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var got []event.Event
	for _, m := range msgs {
		if got, err = event.DecodeAppend(got, m.Values); err != nil {
			t.Fatalf("decode %v: %v", m.ID, err)
		}
	}
	return got
}

// attemptsWithin bounds the attempts an Obtain with retry can make before
// deadline: one at the start, one after each wait that ends before it, and
// one after the last wait, which the deadline cuts short. Each wait counts
// as half what the strategy returns, the least ExponentialBackoff's jitter
// can make it, so that the bound holds for every draw.
func attemptsWithin(retry RetryStrategy, deadline time.Duration) int {
	n, waited := 1, time.Duration(0)
	for {
		d, again := retry.Backoff(n)
		if !again {
			return n
		}
		n++
		if waited += d / 2; waited >= deadline {
			return n
		}
	}
}

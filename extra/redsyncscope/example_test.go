package redsyncscope_test

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/lockscope/lockscope/extra/redsyncscope"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// exampleRedis starts a private redis-server for an example. In your code:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
var exampleRedis = redistest.ExampleClient

// A refused TryLock names the holder; Extend is a renewal.
func Example() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()
	sink := &lock.MemorySink{} // in your code: lock.NewEmitter(rdb, nil)
	events := lock.NewEmitter(nil, &lock.EmitterOptions{Sink: sink})

	pool := goredis.NewPool(rdb)
	a := redsyncscope.New(&redsyncscope.Options{Recorder: events, Owner: "scheduler-a"}, pool)
	b := redsyncscope.New(&redsyncscope.Options{Recorder: events, Owner: "scheduler-b"}, pool)
	m := a.NewMutex("cron:nightly", redsync.WithExpiry(30*time.Second))
	if err := m.LockContext(ctx); err != nil {
		panic(err)
	}
	if err := b.NewMutex("cron:nightly").TryLockContext(ctx); err != nil {
		fmt.Println("b:", err)
	}
	m.ExtendContext(ctx)
	m.UnlockContext(ctx)

	events.Close(ctx)
	for _, e := range sink.Events() {
		fmt.Printf("%-8s %s holder=%q reason=%q ttl=%v\n", e.Type, e.Owner, e.Holder, e.Reason, e.TTL)
	}
	// Output:
	// b: lock already taken, locked nodes: [0]
	// acquired scheduler-a holder="" reason="" ttl=30s
	// failed   scheduler-b holder="scheduler-a" reason="held" ttl=0s
	// renewed  scheduler-a holder="" reason="" ttl=30s
	// released scheduler-a holder="" reason="" ttl=0s
}

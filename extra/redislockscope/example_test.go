package redislockscope_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"

	"github.com/lockscope/lockscope/extra/redislockscope"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// exampleRedis starts a private redis-server for an example. In your code:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
var exampleRedis = redistest.ExampleClient

// Two workers want one invoice: the second waits, and lockscope sees it
// wait (with the holder it waited on) before it gives up.
func Example() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()
	sink := &lock.MemorySink{} // in your code: lock.NewEmitter(rdb, nil)
	events := lock.NewEmitter(nil, &lock.EmitterOptions{Sink: sink})

	a := redislockscope.New(rdb, &redislockscope.Options{Recorder: events, Owner: "billing-a"})
	b := redislockscope.New(rdb, &redislockscope.Options{Recorder: events, Owner: "billing-b"})
	held, err := a.Obtain(ctx, "invoice:42", 10*time.Second, nil)
	if err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = b.Obtain(wctx, "invoice:42", 10*time.Second, &redislock.Options{
		RetryStrategy: redislock.LinearBackoff(20 * time.Millisecond),
	})
	fmt.Println("b:", errors.Is(err, context.DeadlineExceeded))
	held.Release(ctx)

	events.Close(ctx)
	for _, e := range sink.Events() {
		fmt.Printf("%-8s %s holder=%q reason=%q\n", e.Type, e.Owner, e.Holder, e.Reason)
	}
	// Output:
	// b: true
	// acquired billing-a holder="" reason=""
	// waiting  billing-b holder="billing-a" reason=""
	// failed   billing-b holder="billing-a" reason="timeout"
	// released billing-a holder="" reason=""
}

package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
)

// Example_instrumented is the README's library example: a client whose every
// lifecycle step is emitted, in batches, to the lockscope event stream.
func Example_instrumented() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()

	// README begin: README.md shows the lines from here to README end.
	events := lock.NewEmitter(rdb, nil) // batches events in the background; Record never blocks
	client := lock.New(rdb, &lock.Options{Owner: "billing-worker", Recorder: events})

	err := client.Do(ctx, "invoice:17", 10*time.Second, &lock.ObtainOptions{
		Retry:   lock.ExponentialBackoff(10*time.Millisecond, time.Second),
		Fencing: true,
	}, func(ctx context.Context) error {
		lease, _ := lock.FromContext(ctx)
		fmt.Println("charging invoice 17 with a fence:", lease.Fence() > 0)
		return nil
	})
	var held *lock.NotObtainedError
	if errors.As(err, &held) && held.Holder != nil {
		fmt.Printf("invoice:17 is held by %s for %v more\n", held.Holder.Owner, held.Holder.TTL)
	}
	// README end
	fmt.Println("err:", err)

	// Close flushes what is buffered; the collector reads it from the stream.
	events.Close(ctx)
	entries, _ := rdb.XRange(ctx, event.DefaultStream, "-", "+").Result()
	for _, entry := range entries {
		evs, _ := event.Decode(entry.Values)
		for _, e := range evs {
			fmt.Println(e.Type, e.Key, e.Owner)
		}
	}
	// Output:
	// charging invoice 17 with a fence: true
	// err: <nil>
	// acquired invoice:17 billing-worker
	// released invoice:17 billing-worker
}

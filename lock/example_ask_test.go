package lock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/lockscope/lockscope/lock"
)

// An editor holds a workflow's edit lock; a colleague's operator asks it to
// release. The holder hears the request at once (not at a renewal), saves
// and returns, and Do releases the lock.
func ExampleLease_ReleaseRequested() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()

	editor := lock.New(rdb, &lock.Options{Owner: "editor/alice"})
	listening := make(chan struct{})
	finished := make(chan error)
	go func() {
		finished <- editor.Do(ctx, "workflow:42", 30*time.Second, nil, func(ctx context.Context) error {
			lease, _ := lock.FromContext(ctx)
			asks := lease.ReleaseRequested()
			close(listening)
			select {
			case r := <-asks:
				fmt.Printf("%s asks: %s (forcing in %v)\n", r.Operator, r.Reason, r.Grace)
				fmt.Println("saving the draft, releasing")
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	<-listening

	// The operator's side (the dashboard's "Ask to release", or
	// lockscope release workflow:42 --ask): release what you saw.
	operator := lock.New(rdb, nil)
	h, _ := operator.Inspect(ctx, "workflow:42")
	for n, _ := operator.Listeners(ctx, h); n == 0; n, _ = operator.Listeners(ctx, h) {
		time.Sleep(5 * time.Millisecond) // the holder's SUBSCRIBE is on its way
	}
	if _, n, err := operator.RequestRelease(ctx, "workflow:42", h.Fingerprint,
		lock.ReleaseRequest{Operator: "bob", Reason: "I need to edit it", Grace: 30 * time.Second}); err != nil || n == 0 {
		fmt.Println("not heard:", n, err)
	}
	fmt.Println("Do:", <-finished)
	_, err := operator.Inspect(ctx, "workflow:42")
	fmt.Println("now:", err)
	// Output:
	// bob asks: I need to edit it (forcing in 30s)
	// saving the draft, releasing
	// Do: <nil>
	// now: lock: not held
}

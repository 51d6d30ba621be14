package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// exampleRedis starts a private redis-server for an example. In your code:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
var exampleRedis = redistest.ExampleClient

func Example() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()

	client := lock.New(rdb, &lock.Options{Owner: "billing-worker"})
	lease, err := client.Obtain(ctx, "invoice:17", 10*time.Second, nil)
	if err != nil {
		fmt.Println("not obtained:", err)
		return
	}
	fmt.Println("holding", lease.Key(), "as", lease.Owner())
	// ... work on invoice 17 ...
	if err := lease.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	fmt.Println("released")
	// Output:
	// holding invoice:17 as billing-worker
	// released
}

func ExampleClient_Do() {
	rdb, done := exampleRedis()
	defer done()
	client := lock.New(rdb, &lock.Options{Owner: "report-job"})

	// Do obtains, renews every ttl/3 while fn runs, and releases. fn's ctx is
	// cancelled at once if the lock is lost.
	err := client.Do(context.Background(), "report:daily", 3*time.Second, &lock.ObtainOptions{
		Retry: lock.ExponentialBackoff(10*time.Millisecond, time.Second),
	}, func(ctx context.Context) error {
		fmt.Println("building the daily report")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// building the daily report
	// err: <nil>
}

func ExampleClient_Try() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()
	alice := lock.New(rdb, &lock.Options{Owner: "alice"})
	bob := lock.New(rdb, &lock.Options{Owner: "bob"})

	held, _ := alice.Obtain(ctx, "deploy:prod", time.Minute, nil)
	defer held.Release(ctx)

	_, holder, err := bob.Try(ctx, "deploy:prod", time.Minute, nil)
	if errors.Is(err, lock.ErrNotObtained) {
		fmt.Printf("held by %s for about %v more\n", holder.Owner, holder.TTL.Round(time.Minute))
	}
	// Output:
	// held by alice for about 1m0s more
}

// storage is a resource that accepts writes only with a fencing token at
// least as large as any it has seen, so a holder that stalled past its TTL
// cannot overwrite the work of the next holder.
type storage struct {
	mu      sync.Mutex
	highest int64
	data    string
}

var errStaleFence = errors.New("storage: stale fencing token")

func (s *storage) Write(fence int64, data string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.highest {
		return errStaleFence
	}
	s.highest, s.data = fence, data
	return nil
}

func ExampleLease_Fence() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()
	client := lock.New(rdb, nil)
	var store storage
	fenced := &lock.ObtainOptions{Fencing: true}

	first, _ := client.Obtain(ctx, "file:report.csv", 100*time.Millisecond, fenced)
	<-first.Done() // first stalls past its TTL...
	second, _ := client.Obtain(ctx, "file:report.csv", time.Second,
		&lock.ObtainOptions{Fencing: true, Retry: lock.LinearBackoff(10 * time.Millisecond)})

	fmt.Println("second writes:", store.Write(second.Fence(), "fresh"))
	fmt.Println("first writes late:", store.Write(first.Fence(), "stale"))
	fmt.Println("stored:", store.data)
	second.Release(ctx)
	// Output:
	// second writes: <nil>
	// first writes late: storage: stale fencing token
	// stored: fresh
}

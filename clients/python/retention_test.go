package python

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestFutureIDKeepsEveryonesHistory: the Go emitter writes, a hostile
// writer XADDs an entry with an ID in the future (20 minutes ahead;
// 9999999999999-0), the Python emitter and the Go emitter keep writing
// with the default retention (15 minutes), and a `lockscope serve` started
// after them replays every event both wrote (before, both emitters trimmed
// with MINID future − 15 min: 107 entries cut to 30, a replica started
// after replayed 5 720 of 8 126 events).
func TestFutureIDKeepsEveryonesHistory(t *testing.T) {
	checkPython(t)
	for _, name := range []string{"20 minutes ahead", "9999999999999-0"} {
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			rdb := srv.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			em := lock.NewEmitter(rdb, &lock.EmitterOptions{BatchSize: 10})
			goEvents := 0
			emit := func(n int) {
				t.Helper()
				for i := range n {
					em.Record(event.Event{Type: event.Renewed, Key: fmt.Sprint("go:", goEvents), TS: time.Now().UnixNano(), TTL: time.Minute})
					goEvents++
					if i%10 == 9 {
						if err := em.Flush(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			emit(200)
			future := name
			if name == "20 minutes ahead" {
				now, err := rdb.Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				future = strconv.FormatInt(now.Add(20*time.Minute).UnixMilli(), 10) + "-0"
			}
			if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: event.DefaultStream, ID: future, Values: []any{"hostile", "1"}}).Err(); err != nil {
				t.Fatalf("XADD %s: %v", future, err)
			}
			const pyEvents = 200
			py := pythonCmd(ctx, t, "-c", fmt.Sprintf(`
import time, redis, lockscope
from lockscope import event as ev
r = redis.Redis(port=%d)
e = lockscope.Emitter(r, batch_size=10)
for i in range(%d):
    e.record(ev.Event("renewed", key="py:%%d" %% i, ts=time.time_ns(), ttl=60000))
    if i %% 10 == 9:
        e.flush(timeout=5)
e.close()
print(e.stats())
`, srv.Port(), pyEvents))
			if out, err := py.CombinedOutput(); err != nil {
				t.Fatalf("python emitter: %v\n%s", err, out)
			}
			emit(200)
			em.Close(ctx)

			s := startServe(t, srv.URL())
			want := float64(goEvents + pyEvents)
			var got float64
			if !redistest.Poll(ctx, func() bool {
				got = s.Metric("lockscope_events_total", map[string]string{"type": "renewed"})
				return got >= want
			}) {
				t.Fatalf("a replica started after replays %v events, want all %v (%d from Go, %d from Python)", got, want, goEvents, pyEvents)
			}
			if got != want {
				t.Errorf("replayed %v events, want %v", got, want)
			}
		})
	}
}

package reliability

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestPartitionsSumTheirPending: `serve --partitions 2`, whose group has 3
// entries pending on partition 0 and 5 on partition 1 (delivered to
// another consumer that never acknowledges them), exports
// lockscope_stream_pending_entries 8, the sum (before, each partition's
// follower set the one gauge and the last to report won: 3 or 5, never 8).
func TestPartitionsSumTheirPending(t *testing.T) {
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := testCtx(t, 2*time.Minute)
	p := startServe(t, bin, srv.URL(), nil, "--partitions", "2")
	streams := event.Streams(event.DefaultStream, 2)
	group := func(stream string) string {
		var name string
		if !redistest.Poll(ctx, func() bool {
			gs, err := rdb.XInfoGroups(ctx, stream).Result()
			if err == nil && len(gs) == 1 {
				name = gs[0].Name
			}
			return name != ""
		}) {
			t.Fatalf("serve made no group on %s", stream)
		}
		return name
	}
	for i, n := range []int{3, 5} {
		s := streams[i]
		g := group(s)
		// In one transaction: serve's blocked read is served only after it,
		// so the other consumer gets the entries first.
		_, err := rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			for k := range n {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{"other", fmt.Sprint(k)}})
			}
			pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: g, Consumer: "never-acks", Streams: []string{s, ">"}, Count: int64(n)})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var got float64
	if !redistest.Poll(ctx, func() bool {
		m, _, err := scrape(ctx, p.url("/metrics"))
		got = m.sum("lockscope_stream_pending_entries")
		return err == nil && got == 8
	}) {
		t.Fatalf("lockscope_stream_pending_entries = %v, want 8 (3 + 5)", got)
	}
}

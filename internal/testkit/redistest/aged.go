package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// AddAged adds n entries to stream whose IDs are age older than Redis's
// clock now, as another client would have written them then, each with
// the one field "other" set to kind: tests of trimming by age (MINID) seed
// a stream with them. Entries must be added oldest first.
func AddAged(tb testing.TB, rdb redis.UniversalClient, stream string, age time.Duration, n int, kind string) {
	tb.Helper()
	ctx := context.Background()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		tb.Fatal(err)
	}
	ms := now.UnixMilli() - age.Milliseconds()
	pipe := rdb.Pipeline()
	for i := range n {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: fmt.Sprintf("%d-%d", ms, i), Values: []any{"other", kind}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		tb.Fatal(err)
	}
}

// AgedKinds counts stream's entries by their "other" field (see AddAged);
// entries without one count under "".
func AgedKinds(tb testing.TB, rdb redis.UniversalClient, stream string) map[string]int {
	tb.Helper()
	msgs, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		tb.Fatal(err)
	}
	kinds := map[string]int{}
	for _, m := range msgs {
		k, _ := m.Values["other"].(string)
		kinds[k]++
	}
	return kinds
}

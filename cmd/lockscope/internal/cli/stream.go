package cli

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
)

// newestEvents reads the newest events of stream (every partition of it),
// newest entries first, up to limit events per partition. Entries that do
// not decode are skipped, as the collector skips them.
func newestEvents(ctx context.Context, rdb redis.UniversalClient, stream string, partitions, limit int) ([]event.Event, error) {
	var evs []event.Event
	for _, st := range event.Streams(stream, max(partitions, 1)) {
		end, n := "+", 0
		for n < limit {
			msgs, err := rdb.XRevRangeN(ctx, st, end, "-", 64).Result()
			if err != nil {
				return nil, err
			}
			for _, m := range msgs {
				if d, err := event.Decode(m.Values); err == nil {
					evs = append(evs, d...)
					n += len(d)
				}
			}
			if len(msgs) < 64 {
				break
			}
			end = "(" + msgs[len(msgs)-1].ID
		}
	}
	return evs, nil
}

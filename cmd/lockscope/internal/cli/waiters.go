package cli

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector/state"
)

// waitersScan bounds how many of the newest events liveWaiters reads per
// partition. A waiter whose waiting event is older than that is missed (never
// invented): at 1 000 events/s, 20 000 events cover the last 20 seconds.
const waitersScan = 20_000

// liveWaiters counts, per key, the callers waiting now among the newest
// entries of the stream (each partition), by the state's own rule
// (state.LiveWaiters).
func liveWaiters(ctx context.Context, rdb redis.UniversalClient, stream string, partitions int, now time.Time) (map[string]int, error) {
	evs, err := newestEvents(ctx, rdb, stream, partitions, waitersScan)
	if err != nil {
		return nil, err
	}
	return state.LiveWaiters(evs, now), nil
}

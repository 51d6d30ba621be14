package cli

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// errStopScan ends scanStrings early.
var errStopScan = errors.New("stop")

// scanStrings calls each (one call at a time) for the string keys matching
// pattern on every master (a Cluster's keys live on several) until it
// returns false.
func scanStrings(ctx context.Context, rdb redis.UniversalClient, pattern string, each func(key string) bool) error {
	var mu sync.Mutex
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.ScanType(ctx, 0, pattern, 500, "string").Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			more := each(iter.Val())
			mu.Unlock()
			if !more {
				return errStopScan
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	} else {
		err = scan(ctx, rdb)
	}
	if errors.Is(err, errStopScan) {
		return nil
	}
	return err
}

package cli

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// errStopScan ends scanLocks early.
var errStopScan = errors.New("stop")

// scanLocks calls each (one call at a time) for the keys matching pattern
// that can be locks, strings and hashes (Redisson's), on every master (a
// Cluster's keys live on several) until it returns false.
func scanLocks(ctx context.Context, rdb redis.UniversalClient, pattern string, each func(key string) bool) error {
	var mu sync.Mutex
	scan := func(ctx context.Context, c redis.Cmdable) error {
		for _, typ := range []string{"string", "hash"} {
			iter := c.ScanType(ctx, 0, pattern, 500, typ).Iterator()
			for iter.Next(ctx) {
				mu.Lock()
				more := each(iter.Val())
				mu.Unlock()
				if !more {
					return errStopScan
				}
			}
			if err := iter.Err(); err != nil {
				return err
			}
		}
		return nil
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

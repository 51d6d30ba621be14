package lock

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
)

// Fencing's other half: the protected resource refuses a write whose fence
// is lower than the highest it has accepted. A lock alone cannot stop a
// holder that paused past its TTL (GC, swap, a stopped VM) from writing
// after its successor; a resource that checks fences can.

//go:embed guard.lua
var guardSrc string

var guardScript = redis.NewScript(guardSrc)

// GuardPrefix starts every key in which a FenceGuard keeps the highest
// fence a resource accepted.
const GuardPrefix = "lockscope:guard:"

// GuardKey returns the key that keeps the highest fence accepted by the
// Redis-held resource key: in key's cluster hash slot (as FenceKey is in
// its lock's), so the guard's script reads and writes both at once.
func GuardKey(key string) string { return slotKey(GuardPrefix, key) }

// ErrStaleFence: a write carried a fence lower than the highest the
// resource has accepted, so its writer no longer holds the lock; nothing
// was written. The error is a *StaleFenceError.
var ErrStaleFence = errors.New("lock: stale fence")

// StaleFenceError is what a FenceGuard returns for a refused write.
type StaleFenceError struct {
	Resource string
	Fence    int64 // the refused write's
	Highest  int64 // the highest the resource has accepted; 0 when not known (SQL)
}

func (e *StaleFenceError) Error() string {
	if e.Highest > 0 {
		return fmt.Sprintf("lock: stale fence: %q refused fence %d (it accepted %d)", e.Resource, e.Fence, e.Highest)
	}
	return fmt.Sprintf("lock: stale fence: %q refused fence %d", e.Resource, e.Fence)
}

// Is lets errors.Is match ErrStaleFence.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

// GuardOptions configure a FenceGuard. The zero value is usable.
type GuardOptions struct {
	// Recorder receives a fence_rejected event for every refused write
	// (the Emitter the lock clients record to, so that lockscope ties the
	// refusal to the stale holder's hold). nil: none.
	Recorder Recorder
}

// FenceGuard is the resource's half of fencing: it accepts a write only with
// a fence at least the highest the resource has accepted, and records each
// refusal as a fence_rejected event. Set guards a Redis-held resource in one
// script; Updated reports the outcome of the SQL form. A FenceGuard is safe
// for concurrent use.
type FenceGuard struct {
	rdb redis.UniversalClient
	rec Recorder
}

// NewFenceGuard returns a guard that keeps Redis-held resources' fences in
// rdb (Set); the SQL form needs no Redis (rdb may be nil for Updated alone).
// opt may be nil.
func NewFenceGuard(rdb redis.UniversalClient, opt *GuardOptions) *FenceGuard {
	if opt == nil {
		opt = &GuardOptions{}
	}
	return &FenceGuard{rdb: rdb, rec: opt.Recorder}
}

// Set writes value to the Redis string key, the resource the lock lockKey
// protects, if fence (the writer's Lease.Fence) is at least the highest fence
// a write to key carried; the highest is kept in GuardKey(key), which never
// expires. A refused write changes nothing, is recorded, and returns an error
// matching ErrStaleFence.
func (g *FenceGuard) Set(ctx context.Context, lockKey string, fence int64, key, value string) error {
	res, err := guardScript.Run(ctx, g.rdb, []string{GuardKey(key), key}, fence, value).Int64Slice()
	if err != nil {
		return err
	}
	if len(res) != 2 {
		return fmt.Errorf("lock: guard script answered %v", res)
	}
	if res[0] == 1 {
		return nil
	}
	return g.refused(lockKey, key, fence, res[1])
}

// Updated reports the outcome of a fenced SQL update of one row, the
// resource the lock lockKey protects, that sets the row's fence and writes
// only if the row's fence is not higher:
//
//	UPDATE orders SET total = $2, fence = $1 WHERE id = $3 AND fence <= $1
//
// res and err are what ExecContext returned. An update that changed no row
// was refused (the row must exist: insert it with fence 0 first): Updated
// records it and returns an error matching ErrStaleFence. resource names the
// row in events and errors ("orders/42").
func (g *FenceGuard) Updated(ctx context.Context, lockKey string, fence int64, resource string, res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	return g.refused(lockKey, resource, fence, 0)
}

// refused records a refusal and returns its error. The event names the
// stale hold by its fence alone: the resource knows no more of its writer.
func (g *FenceGuard) refused(lockKey, resource string, fence, highest int64) error {
	if g.rec != nil {
		g.rec.Record(event.Event{Type: event.FenceRejected, Key: lockKey, Fence: fence, Reason: resource, TS: time.Now().UnixNano()})
	}
	return &StaleFenceError{Resource: resource, Fence: fence, Highest: highest}
}

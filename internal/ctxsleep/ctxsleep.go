// Package ctxsleep is the one context-aware sleep of the server's code (the
// collector's backoffs and the demo workload's pauses). The test kit, a
// module of its own, keeps its copy (redistest.Sleep); the lock library,
// another module, waits with timers it reuses.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d or until ctx is done, and reports whether d passed first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

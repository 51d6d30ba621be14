package collector

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

func TestRunLeavesNoGoroutines(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rdb := srv.Client(t)
	agg, _ := testAgg(t, state.Config{})
	c := startFollower(t, rdb, agg, &Options{Watch: []string{"lock:*"}, ClaimMinIdle: time.Millisecond})
	waitSynced(t, c, 1)
	redistest.WaitFor(t, waitLimit, "ready", func() bool { return agg.Health() == nil })
	c.stop(t)
	if err := agg.Health(); err == nil {
		t.Errorf("Health() after Run returned = nil, want an error saying the collector stopped")
	}
	rdb.Close()
}

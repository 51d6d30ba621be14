package collector

import (
	"context"
	"errors"
	"testing"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

func TestSecondProcessAsTheSameReplicaIsRefused(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	first, _ := testAgg(t, state.Config{})
	startReplica(t, rdb, first, stream, "same")
	redistest.WaitFor(t, waitLimit, "first reading", func() bool {
		g, _ := rdb.XInfoGroups(context.Background(), stream).Result()
		return len(g) == 1 && first.Health() == nil
	})
	// A second start of the same replica while the first reads: a dead
	// predecessor would be taken over, a live one is refused.
	second, _ := testAgg(t, state.Config{})
	startReplica(t, rdb, second, stream, "same")
	redistest.WaitFor(t, waitLimit, "second refused", func() bool {
		err := second.Health()
		return err != nil && errors.Is(err, errDuplicateReplica)
	})
	if err := first.Health(); err != nil {
		t.Errorf("first replica's health = %v, want nil", err)
	}
}

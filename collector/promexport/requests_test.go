package promexport

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockscope/lockscope/collector/internal/evtest"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

// TestReleaseRequestsExposed: lockscope_release_requests_total counts the
// holds asked by class and outcome, every outcome present from the class's
// first event, so a rate() sees the first request.
func TestReleaseRequestsExposed(t *testing.T) {
	a, clk, m := newTestState(t, state.Config{})
	ms := time.Millisecond
	ask := func(key, lease string, at time.Duration) event.Event {
		e := evtest.Ev(event.Requested, key, "A", lease, at)
		e.By, e.Count = "bob", 1
		return e
	}
	forced := evtest.Ended(event.Forced, "wf:2", "A", "L2", 400*ms, 400*ms, "")
	forced.By = "bob"
	clk.Set(evtest.T0.Add(time.Second))
	a.Apply([]event.Event{
		evtest.Acquired("wf:1", "A", "L1", 0, 0, 1, 30*time.Second),
		evtest.Acquired("wf:2", "A", "L2", 0, 0, 1, 30*time.Second),
		evtest.Acquired("jobs:1", "A", "L3", 0, 0, 1, 30*time.Second),
		ask("wf:1", "L1", 100*ms),
		ask("wf:2", "L2", 100*ms),
		evtest.Ended(event.Released, "wf:1", "A", "L1", 200*ms, 200*ms, ""),
		forced,
	})
	want := `# HELP lockscope_release_requests_total Holds an operator asked to release (the requested event), once per hold, by outcome: released (by its holder), forced (by an operator), ignored (the hold ended otherwise, or outlasted the request's grace by 5 minutes).
# TYPE lockscope_release_requests_total counter
lockscope_release_requests_total{class="jobs:*",outcome="forced"} 0
lockscope_release_requests_total{class="jobs:*",outcome="ignored"} 0
lockscope_release_requests_total{class="jobs:*",outcome="released"} 0
lockscope_release_requests_total{class="wf:*",outcome="forced"} 1
lockscope_release_requests_total{class="wf:*",outcome="ignored"} 0
lockscope_release_requests_total{class="wf:*",outcome="released"} 1
`
	if err := testutil.CollectAndCompare(m.releaseRequests, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if probs, err := testutil.CollectAndLint(m.releaseRequests); err != nil || len(probs) > 0 {
		t.Errorf("lint: %v %v", probs, err)
	}
}

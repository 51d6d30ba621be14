package state

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// TestARestartedReplicaBinsLikeALiveOne replays what
// TestTwoReplicasAndASIGKILLShowOneTruth (test/reliability) caught: a live
// replica applies each entry 20 ms after its events; a replica restarted
// 7 s into a step replays the stream up to then, and then reads the entries
// written since, 1.5 s late (its start took that long), after the step
// ended. Each acquisition must land in the same step on both: before the
// fix the restarted replica put the backlog's ~45 acquisitions into the next
// step (a hole where it restarted, a spike after).
func TestARestartedReplicaBinsLikeALiveOne(t *testing.T) {
	const n = 80
	boundary := 3 * seriesStep // a step's end, aggT0 being step-aligned
	at := func(i int) time.Duration { return boundary - 10*time.Second + time.Duration(i)*250*time.Millisecond }
	var evs []event.Event
	for i := range n {
		lease := fmt.Sprintf("l%d", i)
		evs = append(evs, acquired(fmt.Sprintf("job:%d", i%8), "worker", lease, at(i), 0, 1, 10*time.Second),
			ended(event.Released, fmt.Sprintf("job:%d", i%8), "worker", lease, at(i)+100*time.Millisecond, 100*time.Millisecond, ""))
	}

	live, lclk := newTestAggregator(t, Config{})
	for _, e := range evs {
		lclk.Set(time.Unix(0, e.TS).Add(20 * time.Millisecond))
		live.Apply([]event.Event{e})
	}

	restarted, rclk := newTestAggregator(t, Config{})
	stop := aggT0.Add(boundary - 3*time.Second) // the restart: what the stream holds then is replayed
	rclk.Set(stop)
	i := slices.IndexFunc(evs, func(e event.Event) bool { return e.TS >= stop.UnixNano() })
	restarted.BeginReplay(stop.Add(-5 * time.Minute))
	restarted.Replay(evs[:i], true)
	restarted.EndReplay(time.Time{})
	rclk.Set(aggT0.Add(boundary + 1500*time.Millisecond))
	restarted.Tick()
	j := slices.IndexFunc(evs, func(e event.Event) bool { return e.TS >= rclk.Now().UnixNano() })
	restarted.Apply(evs[i:j]) // the backlog, read late
	for _, e := range evs[j:] {
		rclk.Set(time.Unix(0, e.TS).Add(20 * time.Millisecond))
		restarted.Apply([]event.Event{e})
	}

	end := aggT0.Add(boundary + 10*time.Second + time.Second)
	lclk.Set(end)
	rclk.Set(end)
	a, b := live.Overview().AcquireSeries, restarted.Overview().AcquireSeries
	var sum float64
	for _, x := range a {
		sum += x * seriesStep.Seconds()
	}
	if sum != n {
		t.Fatalf("the live replica's series counts %v acquisitions, want %d: %v", sum, n, a)
	}
	if !slices.Equal(a, b) {
		t.Errorf("acquisitions per step differ:\nlive      %v\nrestarted %v", a[len(a)-4:], b[len(b)-4:])
	}
}

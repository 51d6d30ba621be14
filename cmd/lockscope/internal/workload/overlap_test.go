package workload

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/syncbuf"
)

// TestPausedHolderThatWorksOnIsTheGroundTruth: the second pause's ledger
// sync does not look at its lease after the thaw and writes on while the
// second replica holds the lock: the workload counts and logs that overlap
// (its ground truth: key, both owners, from the second replica's
// acquisition to the stale write), and the account's fence guard refuses
// the write, recorded as a fence_rejected event with the stale hold's
// fence. The first pause (its sync aborts on the loss) is no overlap.
func TestPausedHolderThatWorksOnIsTheGroundTruth(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// At speed 20: pauses at 250 ms and some 1.5 s later, TTL 100 ms.
	st, rec, prefix := simulate(t, Options{Scenarios: []string{Pause}, Speed: 20, Duration: 2800 * time.Millisecond, Logger: log})
	if st.Pauses != 2 || st.Overlaps != 1 {
		t.Fatalf("pauses %d, overlaps %d; want 2 and 1\n%s", st.Pauses, st.Overlaps, logs.String())
	}
	type logged struct {
		Msg           string `json:"msg"`
		Key           string `json:"key"`
		First, Second string
		Start, End    time.Time
		Fenced        bool
	}
	var truth []logged
	for _, line := range bytes.Split([]byte(logs.String()), []byte("\n")) {
		var v logged
		if json.Unmarshal(line, &v) == nil && v.Msg == "workload: overlap" {
			truth = append(truth, v)
		}
	}
	if len(truth) != 1 {
		t.Fatalf("logged overlaps = %+v, want one\n%s", truth, logs.String())
	}
	o := truth[0]
	if o.First != "ledger-sync/pod-1" || o.Second != "ledger-sync/pod-2" || !o.Fenced || !o.Start.Before(o.End) {
		t.Errorf("logged overlap = %+v, want pod-1 then pod-2, fenced, start before end", o)
	}
	evs := eventsOn(rec, prefix+"ledger:account-")
	var stale int64
	var takeover *event.Event
	for i, e := range evs {
		if e.Type == event.Acquired && e.Owner == "ledger-sync/pod-1" && e.Key == o.Key {
			stale = e.Fence
		}
		if e.Type == event.Acquired && e.Owner == "ledger-sync/pod-2" && e.Key == o.Key {
			takeover = &evs[i]
		}
	}
	if takeover == nil {
		t.Errorf("no acquisition of %s by pod-2 among %+v", o.Key, evs)
	}
	var rejected []event.Event
	for _, e := range evs {
		if e.Type == event.FenceRejected {
			rejected = append(rejected, e)
		}
	}
	if len(rejected) != 1 || rejected[0].Key != o.Key || rejected[0].Fence != stale || stale == 0 {
		t.Errorf("fence_rejected events = %+v, want one of %s with pod-1's fence %d", rejected, o.Key, stale)
	}
}

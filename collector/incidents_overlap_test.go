package collector

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestIncidentStoreOverlapTellsItsHoldsStory: one replica wrote a hold's
// lease_lost fragment, another the overlap that hold became, under the same
// id, in either order: the history keeps one incident, the overlap, with its
// own times, cause, both leases and the largest refusal counts, as
// state.Merge says.
func TestIncidentStoreOverlapTellsItsHoldsStory(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	frag := state.Incident{ID: "lease_lost:1", Kind: state.IncidentLeaseLost, Keys: []string{"wf:7"}, Owners: []string{"pod-7"},
		Start: t0, End: t0.Add(3 * time.Second), EndedBy: "lost", Detail: "the holder found its lock gone or taken", Count: 1}
	ov := state.Incident{ID: "lease_lost:1", Kind: state.IncidentOverlap, Keys: []string{"wf:7"}, Owners: []string{"pod-7", "pod-8"},
		Leases: []string{"L7", "L8"}, Start: t0.Add(600 * time.Millisecond), End: t0.Add(3600 * time.Millisecond), EndedBy: "released",
		Cause: state.CauseExpired, Detail: "the TTL lapsed under a holder that worked on", Count: 1, RenewalsRefused: 1, WritesRefused: 3}
	less := ov
	less.WritesRefused, less.End = 1, t0.Add(time.Second)
	for name, order := range map[string][]state.Incident{"fragment first": {frag, less, ov}, "overlap first": {ov, frag, less}} {
		t.Run(name, func(t *testing.T) {
			s := NewIncidentStore(rdb, redistest.KeyPrefix(t)+"events", nil)
			for _, in := range order {
				s.Incident(in)
				if err := s.Flush(ctx); err != nil { // one record per write: the script merges them
					t.Fatalf("Flush = %v", err)
				}
			}
			got, err := s.List(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]state.Incident{ov}, got); d != "" {
				t.Errorf("history (-want +got):\n%s", d)
			}
		})
	}
}

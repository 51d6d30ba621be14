package collector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestIncidentStoreReplicasShareOneHistory: two replicas write the records
// they derived of the same incidents, in other orders and at other times
// (one saw the stuck hold open and close, the other only its close; each
// saw part of a forced release of many keys): the history holds each
// incident once, merged, with keys and owners of any bytes intact.
func TestIncidentStoreReplicasShareOneHistory(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	ctx := context.Background()
	a, b := NewIncidentStore(rdb, stream, nil), NewIncidentStore(rdb, stream, nil)

	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	key := "job:\xff\x00bin"
	owner := "worker/\xfe"
	stuckOpen := state.Incident{ID: "stuck:1", Kind: state.IncidentStuck, Keys: []string{key}, Owners: []string{owner}, Start: t0, Count: 1}
	stuckEnd := stuckOpen
	stuckEnd.End, stuckEnd.EndedBy = t0.Add(time.Minute), "released"
	forced := func(keys []string, start, end time.Time, n int) state.Incident {
		return state.Incident{ID: "forced:1", Kind: state.IncidentForced, Keys: keys, Owners: []string{"pod-7"}, Start: start, End: end,
			EndedBy: "forced", Detail: "by alice: pod died", Count: n}
	}
	a.Incident(stuckOpen)
	a.Incident(forced([]string{"k1"}, t0.Add(2*time.Minute), t0.Add(2*time.Minute), 1))
	if err := a.Flush(ctx); err != nil {
		t.Fatalf("Flush = %v", err)
	}
	b.Incident(forced([]string{"k2"}, t0.Add(2*time.Minute+time.Second), t0.Add(2*time.Minute+time.Second), 2))
	b.Incident(stuckEnd)
	a.Incident(stuckEnd)
	a.Incident(forced([]string{"k2"}, t0.Add(2*time.Minute+time.Second), t0.Add(2*time.Minute+time.Second), 2))
	if err := b.Flush(ctx); err != nil {
		t.Fatalf("Flush = %v", err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatalf("Flush = %v", err)
	}
	want := []state.Incident{
		forced([]string{"k1", "k2"}, t0.Add(2*time.Minute), t0.Add(2*time.Minute+time.Second), 2),
		stuckEnd,
	}
	for _, s := range []*IncidentStore{a, b} {
		got, err := s.List(ctx, 0)
		if err != nil {
			t.Fatalf("List = %v", err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("List (-want +got):\n%s", d)
		}
	}
	// A later open record never reopens an ended incident.
	b.Incident(stuckOpen)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.List(ctx, 1); len(got) != 1 || got[0].ID != "forced:1" {
		t.Errorf("List(1) = %+v, want the forced release alone (the newest)", got)
	}
	if got, _ := a.List(ctx, 0); len(got) != 2 || got[1].Open() {
		t.Errorf("stuck incident after a late open record = %+v, want still ended", got[1])
	}
}

// TestIncidentStoreBounds: past Max and a quarter the least recently active
// incidents are dropped down to Max; List leaves out those older than
// MaxAge; the hash expires MaxAge after its last write.
func TestIncidentStoreBounds(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	s := NewIncidentStore(rdb, stream, &IncidentOptions{Max: 8, MaxAge: 24 * time.Hour, Now: func() time.Time { return now }})
	in := func(i int, start time.Time) state.Incident {
		return state.Incident{ID: fmt.Sprintf("lease_lost:%02d", i), Kind: state.IncidentLeaseLost, Keys: []string{fmt.Sprint("k", i)},
			Start: start, End: start.Add(time.Second), EndedBy: "lost", Count: 1}
	}
	s.Incident(in(0, now.Add(-48*time.Hour))) // older than MaxAge
	for i := 1; i <= 9; i++ {
		s.Incident(in(i, now.Add(-time.Duration(20-i)*time.Minute)))
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.HLen(ctx, IncidentsKey(stream)).Val(); n != 10 {
		t.Fatalf("HLEN = %d, want 10 (under 8 + 8/4: no trim yet)", n)
	}
	got, err := s.List(ctx, 0)
	if err != nil || len(got) != 9 || got[0].ID != "lease_lost:09" || got[8].ID != "lease_lost:01" {
		t.Fatalf("List = %d incidents (%v), want the 9 within MaxAge, newest first", len(got), err)
	}
	if ttl := rdb.PTTL(ctx, IncidentsKey(stream)).Val(); ttl <= 23*time.Hour || ttl > 24*time.Hour {
		t.Errorf("PTTL of the history = %v, want about MaxAge (24h)", ttl)
	}
	s.Incident(in(10, now.Add(-time.Minute)))
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.HLen(ctx, IncidentsKey(stream)).Val(); n != 8 {
		t.Fatalf("HLEN after the 11th = %d, want 8", n)
	}
	got, _ = s.List(ctx, 0)
	var ids []string
	for _, in := range got {
		ids = append(ids, in.ID)
	}
	want := []string{"lease_lost:10", "lease_lost:09", "lease_lost:08", "lease_lost:07", "lease_lost:06", "lease_lost:05", "lease_lost:04", "lease_lost:03"}
	if d := cmp.Diff(want, ids); d != "" {
		t.Errorf("incidents kept (-want +got):\n%s", d)
	}
}

// TestIncidentStoreKeepsWhatItCouldNotWrite: records queued while Redis
// refuses are written by the next flush that succeeds.
func TestIncidentStoreKeepsWhatItCouldNotWrite(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	ctx := context.Background()
	s := NewIncidentStore(rdb, stream, nil)
	// A string where the hash should be: every script call fails.
	if err := rdb.Set(ctx, IncidentsKey(stream), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Truncate(time.Millisecond)
	s.Incident(state.Incident{ID: "deadlock:1", Kind: state.IncidentDeadlock, Keys: []string{"a", "b"}, Owners: []string{"A", "B"}, Start: start, Count: 1})
	if err := s.Flush(ctx); err == nil {
		t.Fatal("Flush onto a string = nil, want the WRONGTYPE error")
	}
	rdb.Del(ctx, IncidentsKey(stream))
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush = %v", err)
	}
	got, err := s.List(ctx, 0)
	if err != nil || len(got) != 1 || got[0].ID != "deadlock:1" || !got[0].Open() || !got[0].Start.Equal(start) {
		t.Errorf("List = %+v, %v; want the open deadlock", got, err)
	}
}

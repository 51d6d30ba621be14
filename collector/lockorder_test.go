package collector

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestLockOrderStoreReplicasShareOneGraph: two replicas write the figures
// they counted of the same edges (one started later and counted fewer, one
// saw a later sighting): the graph holds each edge once, with the larger
// count, both replicas' owners, the earliest first and the latest last
// sighting with its keys, classes and keys of any bytes intact; a restarted
// replica loads it.
func TestLockOrderStoreReplicasShareOneGraph(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	ctx := context.Background()
	a, b := NewLockOrderStore(rdb, stream, nil), NewLockOrderStore(rdb, stream, nil)

	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	edge := func(count int64, owners []string, first, last time.Duration, fromKey, toKey string) state.OrderEdge {
		return state.OrderEdge{From: "order:\xff*", To: "inventory:*", Count: count, Owners: owners,
			FirstSeen: t0.Add(first), LastSeen: t0.Add(last), FromKey: fromKey, ToKey: toKey}
	}
	a.LockOrderEdges([]state.OrderEdge{edge(7, []string{"svc-a"}, 0, time.Minute, "order:\xff1", "inventory:1")})
	b.LockOrderEdges([]state.OrderEdge{edge(3, []string{"svc-b/\xfe"}, 30*time.Second, 2*time.Minute, "order:\xff2", "inventory:2"),
		{From: "invoice:*", To: "ledger:*", Count: 1, FirstSeen: t0, LastSeen: t0}})
	for _, s := range []*LockOrderStore{a, b} {
		if err := s.Flush(ctx); err != nil {
			t.Fatalf("Flush = %v", err)
		}
	}
	want := []state.OrderEdge{
		{From: "invoice:*", To: "ledger:*", Count: 1, FirstSeen: t0, LastSeen: t0},
		edge(7, []string{"svc-a", "svc-b/\xfe"}, 0, 2*time.Minute, "order:\xff2", "inventory:2"),
	}
	got, err := NewLockOrderStore(rdb, stream, nil).Load(ctx)
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	sortEdges(got)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Load (-want +got):\n%s", d)
	}
	if ttl := rdb.PTTL(ctx, LockOrderKey(stream)).Val(); ttl <= 23*time.Hour || ttl > 24*time.Hour {
		t.Errorf("PTTL(graph) = %v, want the 24 h window", ttl)
	}
}

func sortEdges(es []state.OrderEdge) {
	for i := range es {
		for j := i + 1; j < len(es); j++ {
			if es[j].From+"\x00"+es[j].To < es[i].From+"\x00"+es[i].To {
				es[i], es[j] = es[j], es[i]
			}
		}
	}
}

// TestLockOrderStoreBounded: past MaxOrderEdges and a quarter, the least
// recently seen records are dropped, and so is any last seen before the
// window; a record out of the window is never loaded.
func TestLockOrderStoreBounded(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	ctx := context.Background()
	s := NewLockOrderStore(rdb, stream, &LockOrderOptions{Window: time.Hour})
	now := time.Now().Truncate(time.Millisecond)
	s.LockOrderEdges([]state.OrderEdge{{From: "old:*", To: "older:*", Count: 1, FirstSeen: now.Add(-2 * time.Hour), LastSeen: now.Add(-2 * time.Hour)}})
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(ctx); err != nil || len(got) != 0 {
		t.Errorf("Load = %+v, %v; want nothing: the one edge is older than the window", got, err)
	}
	n := state.MaxOrderEdges + state.MaxOrderEdges/4 + 1
	var es []state.OrderEdge
	for i := range n {
		at := now.Add(-time.Duration(n-i) * time.Second)
		es = append(es, state.OrderEdge{From: fmt.Sprintf("c%d:*", i), To: "z:*", Count: 1, FirstSeen: at, LastSeen: at})
	}
	s.LockOrderEdges(es)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rdb.HLen(ctx, LockOrderKey(stream)).Val(); got != int64(state.MaxOrderEdges) {
		t.Errorf("HLEN after %d edges = %d, want %d", n+1, got, state.MaxOrderEdges)
	}
	got, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range got {
		var i int
		fmt.Sscanf(e.From, "c%d:*", &i)
		if i < n-state.MaxOrderEdges {
			t.Errorf("kept %s, one of the least recently seen", e.From)
			break
		}
	}
}

// TestLockOrderStoreMalformedRecords: records that are not JSON, of the
// wrong shape or too long, written by anyone who may write the key, are
// skipped when read and replaced when merged; nothing stops.
func TestLockOrderStoreMalformedRecords(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	ctx := context.Background()
	s := NewLockOrderStore(rdb, stream, nil)
	now := time.Now().Truncate(time.Millisecond)
	good := state.OrderEdge{From: "a:*", To: "b:*", Count: 2, Owners: []string{"svc"}, FirstSeen: now, LastSeen: now, FromKey: "a:1", ToKey: "b:1"}
	id := edgeID(good.From, good.To)
	if err := rdb.HSet(ctx, LockOrderKey(stream), id, "{not json", "x", `{"from":12,"count":"many"}`,
		"big", `{"from":"YQ==","to":"Yg==","count":1,"last":1,"owners":["`+strings.Repeat("A", 20<<10)+`"]}`).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(ctx); err != nil || len(got) != 0 {
		t.Errorf("Load of malformed records = %+v, %v; want none and no error", got, err)
	}
	s.LockOrderEdges([]state.OrderEdge{good})
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush over a malformed record = %v", err)
	}
	got, err := s.Load(ctx)
	if err != nil || len(got) != 1 {
		t.Fatalf("Load = %+v, %v; want the edge written over the malformed record", got, err)
	}
	if d := cmp.Diff(good, got[0]); d != "" {
		t.Errorf("Load (-want +got):\n%s", d)
	}

	// A string where the hash should be: writes fail and are kept for the
	// next one; a restore starts empty.
	rdb.Del(ctx, LockOrderKey(stream))
	rdb.Set(ctx, LockOrderKey(stream), "not a hash", 0)
	s.LockOrderEdges([]state.OrderEdge{good})
	if err := s.Flush(ctx); err == nil {
		t.Fatal("Flush onto a string = nil, want the WRONGTYPE error")
	}
	agg := state.New(state.Config{})
	s.Restore(ctx, agg)
	if lo := agg.LockOrder(""); len(lo.Edges) != 0 {
		t.Errorf("restored %+v from a string", lo.Edges)
	}
	rdb.Del(ctx, LockOrderKey(stream))
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush = %v", err)
	}
	s.Restore(ctx, agg)
	if lo := agg.LockOrder(""); len(lo.Edges) != 1 || lo.Edges[0].Count != 2 {
		t.Errorf("restored %+v, want the edge kept through the failed write", lo.Edges)
	}
}

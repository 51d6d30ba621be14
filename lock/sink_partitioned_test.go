package lock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// partitionedBatch is events of 40 keys, each key's events in TS order,
// keys interleaved.
func partitionedBatch(base int64) []event.Event {
	var out []event.Event
	for step := range 3 {
		for k := range 40 {
			out = append(out, event.Event{
				Type: []event.Type{event.Acquired, event.Renewed, event.Released}[step],
				Key:  "order:" + strconv.Itoa(k), Owner: "w", Lease: "L" + strconv.Itoa(k),
				TS: base + int64(step*1000+k), TTL: time.Second,
			})
		}
	}
	return out
}

// checkPartitions reads every partition and checks that each holds exactly
// the events of its keys, in the order written.
func checkPartitions(t *testing.T, rdb redis.UniversalClient, streams []string, want []event.Event) {
	t.Helper()
	wantBy := make([][]event.Event, len(streams))
	for _, e := range want {
		p := event.PartitionOf(e.Key, len(streams))
		wantBy[p] = append(wantBy[p], e)
	}
	for p, s := range streams {
		got := redistest.ReadStream(t, rdb, s).Events
		if d := cmp.Diff(wantBy[p], got); d != "" {
			t.Errorf("partition %d (%s) (-want +got):\n%s", p, s, d)
		}
	}
}

func TestPartitionedStreamSink(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	base := redistest.KeyPrefix(t) + "events"
	s := NewPartitionedStreamSink(rdb, base, 4, 0)
	if got, want := s.Streams(), event.Streams(base, 4); !cmp.Equal(got, want) {
		t.Fatalf("Streams() = %q, want %q", got, want)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), s.Streams()...) })
	first := partitionedBatch(1_700_000_000_000_000_000)
	if err := s.Write(context.Background(), first); err != nil {
		t.Fatalf("Write = %v", err)
	}
	second := partitionedBatch(1_700_000_001_000_000_000)[:7]
	if err := s.Write(context.Background(), second); err != nil {
		t.Fatalf("second Write = %v", err)
	}
	checkPartitions(t, rdb, s.Streams(), append(first, second...))
	// Every partition got some of the 40 keys.
	for _, st := range s.Streams() {
		if n := rdb.XLen(context.Background(), st).Val(); n == 0 {
			t.Errorf("partition %s is empty", st)
		}
	}
}

func TestEmitterPartitions(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	base := redistest.KeyPrefix(t) + "events"
	em := NewEmitter(rdb, &EmitterOptions{Stream: base, Partitions: 3})
	want := partitionedBatch(time.Now().UnixNano())
	for i := range want {
		em.Record(want[i])
	}
	if err := em.Close(context.Background()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	streams := event.Streams(base, 3)
	t.Cleanup(func() { rdb.Del(context.Background(), streams...) })
	checkPartitions(t, rdb, streams, want)
	if st := em.Stats(); st.Sent != uint64(len(want)) || st.Dropped != 0 {
		t.Errorf("Stats = %+v, want %d sent, none dropped", st, len(want))
	}
}

// TestPartitionedStreamSinkCluster writes to 3 partitions on a real
// 3-master cluster: each partition lands on a different master.
func TestPartitionedStreamSinkCluster(t *testing.T) {
	cl := redistest.StartCluster(t).Client(t)
	ctx := context.Background()
	base := redistest.KeyPrefix(t) + "events"
	s := NewPartitionedStreamSink(cl, base, 3, 0)
	t.Cleanup(func() {
		for _, st := range s.Streams() {
			cl.Del(ctx, st)
		}
	})
	want := partitionedBatch(1_700_000_000_000_000_000)
	if err := s.Write(ctx, want); err != nil {
		t.Fatalf("Write = %v", err)
	}
	checkPartitions(t, cl, s.Streams(), want)
	masters := map[string]string{}
	for _, st := range s.Streams() {
		slot, err := cl.ClusterKeySlot(ctx, st).Result()
		if err != nil {
			t.Fatal(err)
		}
		if int64(event.Slot(st)) != slot {
			t.Errorf("event.Slot(%q) = %d, CLUSTER KEYSLOT = %d", st, event.Slot(st), slot)
		}
		node, err := cl.MasterForKey(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		addr := node.Options().Addr
		if prev, dup := masters[addr]; dup {
			t.Errorf("partitions %s and %s are both on master %s", prev, st, addr)
		}
		masters[addr] = st
	}
}

package lock

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// addFuture XADDs the hostile writer's entry with an explicit ID, tagged
// "future".
func addFuture(t *testing.T, rdb *redis.Client, stream, id string) {
	t.Helper()
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, ID: id, Values: []any{"other", "future"}}).Err(); err != nil {
		t.Fatalf("XADD %s: %v", id, err)
	}
}

// TestStreamTrimDistrustsFutureIDs: a writer of the stream XADDs an entry
// with an ID in the future (20 minutes ahead, or 9999999999999-0) among
// 300 entries two hours old and 300 a minute old; an emitter with the
// default retention (15 minutes) then writes: the old entries go, the
// recent ones and the future one stay (before, the emitter trimmed with
// MINID newest − 15 min and cut them all). The partitioned sink too.
func TestStreamTrimDistrustsFutureIDs(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		future     string
		partitions int
	}{
		{"20 minutes ahead", strconv.FormatInt(now.Add(20*time.Minute).UnixMilli(), 10) + "-0", 0},
		{"9999999999999-0", "9999999999999-0", 0},
		{"20 minutes ahead, partitioned", strconv.FormatInt(now.Add(20*time.Minute).UnixMilli(), 10) + "-0", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			stream := redistest.KeyPrefix(t) + "events"
			streams := event.Streams(stream, c.partitions)
			for _, s := range streams {
				fillOldAndRecent(t, rdb, s)
				addFuture(t, rdb, s, c.future)
			}
			em := NewEmitter(rdb, &EmitterOptions{Stream: stream, Partitions: c.partitions, BatchSize: 1})
			for i := range 3 {
				for k := range 4 { // keys over both partitions
					em.Record(event.Event{Type: event.Renewed, Key: fmt.Sprint("k", k), TS: int64(i + 1)})
				}
				if err := em.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			em.Close(ctx)
			for _, s := range streams {
				kinds := redistest.AgedKinds(t, rdb, s)
				if kinds["old"] >= 100 || kinds["recent"] != 300 || kinds["future"] != 1 || kinds[""] == 0 {
					t.Errorf("%s: %v, want under 100 old, 300 recent, the future one and the emitter's", s, kinds)
				}
			}
		})
	}
}

// TestStreamTrimBoundedAfterFutureID: after an entry 9999999999999-0 no
// age reaches the entries Redis numbers after it; once there are
// event.RetentionAheadKeep of them the emitter trims to the newest
// RetentionAheadKeep (before, the stream grew without bound).
func TestStreamTrimBoundedAfterFutureID(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	stream := redistest.KeyPrefix(t) + "events"
	t.Cleanup(func() { rdb.Del(context.Background(), stream) })
	fillOldAndRecent(t, rdb, stream)
	addFuture(t, rdb, stream, "9999999999999-0")
	const after = event.RetentionAheadKeep + 1000
	for i := 0; i < after; i += 5000 {
		pipe := rdb.Pipeline()
		for range min(5000, after-i) {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"other", "after"}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	em := NewEmitter(rdb, &EmitterOptions{Stream: stream, BatchSize: 1})
	for i := range 2 { // the first learns the stream's newest ID, the second trims by it
		em.Record(event.Event{Type: event.Renewed, Key: "k", TS: int64(i + 1)})
		if err := em.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	em.Close(ctx)
	n, err := rdb.XLen(ctx, stream).Result()
	if err != nil {
		t.Fatal(err)
	}
	// MINID ~ trims whole nodes: up to one node (100 entries) more stays.
	if n < event.RetentionAheadKeep || n > event.RetentionAheadKeep+200 {
		t.Errorf("XLEN = %d, want about %d", n, event.RetentionAheadKeep)
	}
	first, err := rdb.XRangeN(ctx, stream, "-", "+", 1).Result()
	if err != nil || len(first) != 1 || first[0].Values["other"] != "after" {
		t.Errorf("oldest entry kept = %v (%v), want one of those after the future ID", first, err)
	}
}

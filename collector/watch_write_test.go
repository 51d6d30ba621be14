package collector

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// The watcher trims the stream by age as it writes, on Redis's clock
// (event.Retention): entries more than passiveMaxAge older than its newest go (whole
// nodes: MINID ~), the recent ones stay; a stream only the watcher writes
// to stays bounded.
func TestPassiveWriterTrimsByAge(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	stream := redistest.KeyPrefix(t) + "events"
	redistest.AddAged(t, rdb, stream, 2*passiveMaxAge, 300, "old")
	redistest.AddAged(t, rdb, stream, passiveMaxAge/2, 300, "recent")
	f := &Follower{rdb: rdb, opt: Options{Stream: stream}, log: slog.New(slog.DiscardHandler)}
	p := newPassiveWriter(f, 7, func() { t.Error("the writer resigned: fenced") })
	if err := p.claim(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := p.write(ctx, []event.Event{{Type: event.Expired, Key: "lock:x", TS: int64(i + 1)}}); err != nil {
			t.Fatal(err)
		}
	}
	kinds := redistest.AgedKinds(t, rdb, stream)
	written := int64(kinds["old"] + kinds["recent"] + kinds[""])
	if kinds["old"] >= 100 || kinds["recent"] != 300 || kinds[""] != 3 {
		t.Errorf("entries after 3 watcher writes: %v, want under 100 old (one node at most), 300 recent and 3 of the watcher's", kinds)
	}
	// A lower fence is still refused, and writes nothing.
	stale := newPassiveWriter(f, 6, func() {})
	if err := stale.write(ctx, []event.Event{{Type: event.Expired, Key: "lock:y", TS: 9}}); err != errFenced {
		t.Errorf("write with a lower fence = %v, want errFenced", err)
	}
	if n := rdb.XLen(ctx, stream).Val(); n != written {
		t.Errorf("XLEN after the fenced write = %d, want %d", n, written)
	}
}

// TestPassiveWriterDistrustsFutureIDs: after a writer of the stream XADDs
// an entry with an ID in the future (two hours ahead; 9999999999999-0),
// the watcher still trims by Redis's clock: the old entries go, the recent
// ones and the future one stay (before, it trimmed with MINID future − 1h
// and cut them all).
func TestPassiveWriterDistrustsFutureIDs(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, future := range []string{strconv.FormatInt(now.Add(2*time.Hour).UnixMilli(), 10) + "-0", "9999999999999-0"} {
		stream := redistest.KeyPrefix(t) + future
		redistest.AddAged(t, rdb, stream, 2*passiveMaxAge, 300, "old")
		redistest.AddAged(t, rdb, stream, passiveMaxAge/2, 300, "recent")
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: future, Values: []any{"other", "future"}}).Err(); err != nil {
			t.Fatal(err)
		}
		f := &Follower{rdb: rdb, opt: Options{Stream: stream}, log: slog.New(slog.DiscardHandler)}
		p := newPassiveWriter(f, 7, func() { t.Error("the writer resigned: fenced") })
		if err := p.claim(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := p.write(ctx, []event.Event{{Type: event.Expired, Key: "lock:x", TS: int64(i + 1)}}); err != nil {
				t.Fatal(err)
			}
		}
		if kinds := redistest.AgedKinds(t, rdb, stream); kinds["old"] >= 100 || kinds["recent"] != 300 || kinds["future"] != 1 || kinds[""] != 3 {
			t.Errorf("after %s, 3 watcher writes: %v, want under 100 old, 300 recent, the future one and 3 of the watcher's", future, kinds)
		}
	}
}

package collector

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/redistest"
)

// The watcher trims the stream by age as it writes, on the stream's own
// clock: entries more than passiveMaxAge older than its newest go (whole
// nodes: MINID ~), the recent ones stay; a stream only the watcher writes
// to stays bounded.
func TestPassiveWriterTrimsByAge(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	stream := redistest.KeyPrefix(t) + "events"
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ms := now.UnixMilli()
	pipe := rdb.Pipeline()
	for i := range 300 {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: fmt.Sprintf("%d-%d", ms-2*passiveMaxAge.Milliseconds(), i), Values: []any{"other", "old"}})
	}
	for i := range 300 {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: fmt.Sprintf("%d-%d", ms-passiveMaxAge.Milliseconds()/2, i), Values: []any{"other", "recent"}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	f := &Feeder{rdb: rdb, opt: Options{Stream: stream}, log: slog.New(slog.DiscardHandler)}
	p := newPassiveWriter(f, 7, func() { t.Error("the writer resigned: fenced") })
	if err := p.claim(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // the first write learns the stream's clock, the next ones trim
		if err := p.write(ctx, []event.Event{{Type: event.Expired, Key: "lock:x", TS: int64(i + 1)}}); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, m := range msgs {
		k, _ := m.Values["other"].(string)
		kinds[k]++
	}
	if kinds["old"] >= 100 || kinds["recent"] != 300 || kinds[""] != 3 {
		t.Errorf("entries after 3 watcher writes: %v, want under 100 old (one node at most), 300 recent and 3 of the watcher's", kinds)
	}
	// A lower fence is still refused, and writes nothing.
	stale := newPassiveWriter(f, 6, func() {})
	if err := stale.write(ctx, []event.Event{{Type: event.Expired, Key: "lock:y", TS: 9}}); err != errFenced {
		t.Errorf("write with a lower fence = %v, want errFenced", err)
	}
	if n := rdb.XLen(ctx, stream).Val(); n != int64(len(msgs)) {
		t.Errorf("XLEN after the fenced write = %d, want %d", n, len(msgs))
	}
}

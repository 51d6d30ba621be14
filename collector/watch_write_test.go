package collector

import (
	"context"
	"log/slog"
	"testing"

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
	redistest.AddAged(t, rdb, stream, 2*passiveMaxAge, 300, "old")
	redistest.AddAged(t, rdb, stream, passiveMaxAge/2, 300, "recent")
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

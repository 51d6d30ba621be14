package lock

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

func TestStreamSinkWritesOnePackedEntry(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	s := NewStreamSink(rdb, stream, 0)
	want := everyEventType(1_700_000_000_000_000_000)
	if err := s.Write(context.Background(), want); err != nil {
		t.Fatalf("Write = %v", err)
	}
	read := redistest.ReadStream(t, rdb, stream)
	msgs, got := read.Entries, read.Events
	if len(msgs) != 1 {
		t.Fatalf("Write of %d events made %d entries, want 1", len(want), len(msgs))
	}
	if n := msgs[0].Values[event.FieldCount]; n != strconv.Itoa(len(want)) {
		t.Errorf("entry field %q = %v, want %d", event.FieldCount, n, len(want))
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events read back (-want +got):\n%s", d)
	}
	// The buffer is reused for the next write: nothing of the first leaks in.
	if err := s.Write(context.Background(), want[:1]); err != nil {
		t.Fatalf("second Write = %v", err)
	}
	if got = redistest.ReadStream(t, rdb, stream).Events; !cmp.Equal(append(want, want[0]), got) {
		t.Errorf("after a second Write the stream holds %d events, want %d:\n%s", len(got), len(want)+1, cmp.Diff(append(want, want[0]), got))
	}
}

func TestStreamSinkDefaultStream(t *testing.T) {
	if got := NewStreamSink(nil, "", 0).Stream(); got != event.DefaultStream {
		t.Errorf("NewStreamSink(nil, \"\", 0).Stream() = %q, want %q", got, event.DefaultStream)
	}
}

func TestStreamSinkSplitsOversizedBatches(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	t.Cleanup(func() { rdb.Del(context.Background(), stream) })
	s := NewStreamSink(rdb, stream, 0)
	// 200 events of ~60 kB: 12 MB, four to an entry of at most event.EntryBytes.
	var want []event.Event
	for i := range 200 {
		// Every event has a trace id: the second entry's extension must
		// number its events from that entry's first.
		want = append(want, event.Event{Type: event.Acquired, Key: strings.Repeat(strconv.Itoa(i%10), 60_000), TS: int64(1000 + i),
			TraceID: event.TraceID{0: byte(i), 15: 1}})
	}
	if err := s.Write(context.Background(), want); err != nil {
		t.Fatalf("Write = %v", err)
	}
	read := redistest.ReadStream(t, rdb, stream)
	msgs, got := read.Entries, read.Events
	if len(msgs) != 50 {
		t.Errorf("12 MB of events made %d entries, want 50", len(msgs))
	}
	for _, m := range msgs {
		if b := m.Values[event.FieldBatch].(string); len(b) > event.EntryBytes {
			t.Errorf("entry %s batch is %d bytes, over event.EntryBytes %d", m.ID, len(b), event.EntryBytes)
		}
	}
	if !cmp.Equal(want, got) {
		t.Errorf("events read back differ from the %d written (got %d)", len(want), len(got))
	}
}

// TestStreamSinkEntryBytes checks the emitter's default batch of 2048
// events with short keys goes as one entry, and that an event longer than
// event.EntryBytes goes alone rather than being refused.
func TestStreamSinkEntryBytes(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	t.Cleanup(func() { rdb.Del(context.Background(), stream) })
	s := NewStreamSink(rdb, stream, 0)
	batch := make([]event.Event, defaultBatchSize)
	for i := range batch {
		batch[i] = event.Event{Type: event.Acquired, Key: "bench:lockscope-events:unique:" + strconv.Itoa(i%64),
			Owner: "bench", Lease: "0123456789abcdef", TS: int64(1000 + i), TTL: 10 * time.Second, Attempts: 1}
	}
	long := strings.Repeat("x", event.MaxStringLen)
	huge := event.Event{Type: event.Forced, Key: long, Owner: long, Lease: long, Reason: long, By: long, TS: 5000}
	want := append(append(batch, huge), batch[0])
	if err := s.Write(context.Background(), want); err != nil {
		t.Fatalf("Write = %v", err)
	}
	read := redistest.ReadStream(t, rdb, stream)
	var counts []string
	for _, m := range read.Entries {
		counts = append(counts, m.Values[event.FieldCount].(string))
	}
	if d := cmp.Diff([]string{strconv.Itoa(defaultBatchSize), "1", "1"}, counts); d != "" {
		t.Errorf("events per entry (-want +got):\n%s", d)
	}
	if !cmp.Equal(want, read.Events) {
		t.Errorf("events read back differ from the %d written (got %d)", len(want), len(read.Events))
	}
}

func TestStreamSinkTrims(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	s := NewStreamSink(rdb, stream, 10)
	ctx := context.Background()
	const writes = 500
	for i := range writes {
		if err := s.Write(ctx, []event.Event{{Type: event.Renewed, Key: "k", TS: int64(i + 1)}}); err != nil {
			t.Fatalf("Write %d = %v", i, err)
		}
	}
	// MAXLEN ~ trims whole stream nodes (100 entries by default), so the
	// length is near, not at, 10.
	n, err := rdb.XLen(ctx, stream).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 || n > 200 {
		t.Errorf("XLEN after %d writes with maxLen 10 = %d, want 10..200", writes, n)
	}
}

// fillOldAndRecent adds 300 entries two hours old and 300 a minute old to
// stream, by their IDs' times (the stream's own clock), as other clients
// would have written them.
func fillOldAndRecent(t *testing.T, rdb *redis.Client, stream string) {
	t.Helper()
	redistest.AddAged(t, rdb, stream, 2*time.Hour, 300, "old")
	redistest.AddAged(t, rdb, stream, time.Minute, 300, "recent")
}

// Trimming as EmitterOptions say: by default the last 15 minutes by the
// stream's own clock (older entries go, whole nodes: MINID ~; the recent
// ones other clients wrote stay).
func TestStreamTrimChoices(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		opt       EmitterOptions
		oldAtMost int // of 300 two hours old
		recent    int // of 300 a minute old, kept
	}{
		{"default: 15 minutes", EmitterOptions{}, 99, 300},
		{"never", EmitterOptions{MaxLen: -1}, 300, 300},
		{"max age 1m30s", EmitterOptions{MaxAge: 90 * time.Second}, 99, 300},
		{"max age 30s", EmitterOptions{MaxAge: 30 * time.Second}, 0, 0},
		{"max len wins over max age", EmitterOptions{MaxLen: 1000, MaxAge: time.Second}, 300, 300},
	} {
		t.Run(c.name, func(t *testing.T) {
			stream := redistest.KeyPrefix(t) + "events"
			fillOldAndRecent(t, rdb, stream)
			opt := c.opt
			opt.Stream, opt.BatchSize = stream, 1
			em := NewEmitter(rdb, &opt)
			for i := range 3 {
				em.Record(event.Event{Type: event.Renewed, Key: "k", TS: int64(i + 1)})
				if err := em.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			em.Close(ctx)
			kinds := redistest.AgedKinds(t, rdb, stream)
			// MINID ~ trims whole nodes (up to 100 entries): of entries to
			// trim, at most one node's worth may stay.
			recentOK := kinds["recent"] == c.recent || c.recent == 0 && kinds["recent"] < 100
			oldOK := kinds["old"] <= c.oldAtMost && (c.oldAtMost < 300 || kinds["old"] == 300)
			if !oldOK || !recentOK || kinds[""] != 3 {
				t.Errorf("entries: %v, want old at most %d (all if 300), recent %d (under 100 if 0) and 3 of the emitter's", kinds, c.oldAtMost, c.recent)
			}
		})
	}
}

func TestPartitionedStreamSinkTrimsByAge(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	const n = 2
	streams := event.Streams(stream, n)
	for _, s := range streams {
		fillOldAndRecent(t, rdb, s)
	}
	s := NewPartitionedStreamSinkTrim(rdb, stream, n, StreamTrim{MaxAge: 15 * time.Minute})
	ctx := context.Background()
	// Keys for both partitions, three writes each.
	var keys [n]string
	for i := 0; keys[0] == "" || keys[1] == ""; i++ {
		k := "k" + strconv.Itoa(i)
		keys[event.PartitionOf(k, n)] = k
	}
	for i := range 3 {
		if err := s.Write(ctx, []event.Event{{Type: event.Renewed, Key: keys[0], TS: int64(i + 1)}, {Type: event.Renewed, Key: keys[1], TS: int64(i + 1)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range streams {
		if kinds := redistest.AgedKinds(t, rdb, p); kinds["old"] >= 100 || kinds["recent"] != 300 || kinds[""] != 3 {
			t.Errorf("%s: %v, want under 100 old, 300 recent and 3 of the sink's", p, kinds)
		}
	}
}

func TestMemorySink(t *testing.T) {
	var s MemorySink
	if got := s.Events(); len(got) != 0 {
		t.Fatalf("Events() of a new MemorySink = %v, want none", got)
	}
	const writers, each = 4, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := s.Write(context.Background(), []event.Event{{Type: event.Acquired, Key: strconv.Itoa(w), Attempts: i}}); err != nil {
					t.Errorf("Write = %v", err)
				}
			}
		}()
		go func() { // concurrent readers get consistent snapshots
			defer wg.Done()
			for range each {
				_ = s.Events()
			}
		}()
	}
	wg.Wait()
	got := s.Events()
	if len(got) != writers*each || s.Writes() != writers*each {
		t.Fatalf("after %d writes: %d events, Writes() = %d, want %d of each", writers*each, len(got), s.Writes(), writers*each)
	}
	next := make([]int, writers)
	for _, e := range got {
		w, _ := strconv.Atoi(e.Key)
		if e.Attempts != next[w] {
			t.Fatalf("writer %d: event %d after %d", w, e.Attempts, next[w]-1)
		}
		next[w]++
	}
	// A snapshot does not change under later writes.
	snap := s.Events()
	snap[0].Key = "changed"
	if s.Events()[0].Key == "changed" {
		t.Error("Events() returned the sink's own slice, want a copy")
	}
}

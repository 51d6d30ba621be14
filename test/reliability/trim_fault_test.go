package reliability

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/faultproxy"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// xaddEvents writes n single-event entries (the any-language form), trimmed
// to exactly maxLen entries when maxLen > 0.
func xaddEvents(ctx context.Context, t *testing.T, rdb redis.UniversalClient, stream string, n int, maxLen int64, key string) {
	t.Helper()
	pipe := rdb.Pipeline()
	var fields []string
	for i := range n {
		e := event.Event{Type: event.Acquired, Key: fmt.Sprintf("%s:%d", key, i%50), Owner: "py/1", TS: time.Now().UnixNano(), TTL: time.Minute}
		fields = event.AppendFields(fields[:0], &e)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, MaxLen: maxLen, Values: append([]string(nil), fields...)})
		if pipe.Len() == 500 {
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStreamTrimmedUnderLaggingCollector stalls the collector's connection
// (it is alive but reads nothing, as when it cannot keep up) while emitters
// keep writing to a stream capped at 100 entries. The entries trimmed before
// the group read them are lost; the collector must say exactly how many
// (lockscope_stream_gap_entries_total) and count exactly the rest.
func TestStreamTrimmedUnderLaggingCollector(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	direct := srv.Client(t)
	ctx := testCtx(t, 60*time.Second)
	p := redistest.KeyPrefix(t)
	stream := p + "events"
	proxy := faultproxy.Start(t, srv.Addr())
	colRDB := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { colRDB.Close() })

	agg, reg := newAggregator(t, state.Config{})
	colCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- collector.New(colRDB, agg, &collector.Options{Stream: stream, Consumer: "c", Logger: quietLog()}).Run(colCtx)
	}()
	defer func() { stop(); <-done }()

	// Caught up on 300 entries first.
	const before = 300
	xaddEvents(ctx, t, direct, stream, before, 0, p+"job")
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool { return gather(t, reg).sum("lockscope_events_total") == before }) {
		t.Fatalf("lockscope_events_total = %v, want %d before the stall", gather(t, reg).sum("lockscope_events_total"), before)
	}
	if got := gather(t, reg).sum("lockscope_stream_gap_entries_total"); got != 0 {
		t.Fatalf("lockscope_stream_gap_entries_total = %v before any trim, want 0", got)
	}

	// The collector lags; the stream keeps only the newest 100 entries.
	proxy.Stall()
	const written, maxLen = 2000, 100
	xaddEvents(ctx, t, direct, stream, written, maxLen, p+"job")
	if n := direct.XLen(ctx, stream).Val(); n != maxLen {
		t.Fatalf("XLEN = %d, want %d", n, maxLen)
	}
	proxy.Resume()

	// Every entry written is either counted or reported missing, exactly:
	// a read blocked when the stall began is delivered the first new
	// entries by Redis at once (their reply waits in the stalled
	// connection), so up to one read's worth may be counted rather than
	// trimmed.
	total := func(m families) float64 {
		return m.sum("lockscope_events_total") + m.sum("lockscope_stream_gap_entries_total")
	}
	if !redistest.Poll(testCtx(t, 20*time.Second), func() bool { return total(gather(t, reg)) >= before+written }) {
		m := gather(t, reg)
		t.Fatalf("after the lag: events %v + gap %v = %v, want %d", m.sum("lockscope_events_total"),
			m.sum("lockscope_stream_gap_entries_total"), total(m), before+written)
	}
	// Another poll or two must not report the same gap again.
	redistest.Sleep(ctx, 2500*time.Millisecond)
	m := gather(t, reg)
	gap := m.sum("lockscope_stream_gap_entries_total")
	if got := total(m); got != before+written {
		t.Errorf("events %v + gap %v = %v, want exactly %d written", m.sum("lockscope_events_total"), gap, got, before+written)
	}
	if minGap := float64(written - maxLen - collector.DefaultCount); gap < minGap || gap > written-maxLen {
		t.Errorf("lockscope_stream_gap_entries_total = %v, want between %v and %d", gap, minGap, written-maxLen)
	}
	if got := m.sum("lockscope_stream_lag_entries"); got != 0 {
		t.Errorf("lockscope_stream_lag_entries = %v after catching up, want 0", got)
	}
	t.Logf("written %d, trimmed to %d: counted %v, gap reported %v", written, maxLen, m.sum("lockscope_events_total")-before, gap)
	// Life goes on: new entries are counted and no new gap appears.
	xaddEvents(ctx, t, direct, stream, 50, maxLen, p+"job")
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool { return total(gather(t, reg)) == before+written+50 }) {
		t.Errorf("events + gap = %v, want %d", total(gather(t, reg)), before+written+50)
	}
	redistest.Sleep(ctx, 1200*time.Millisecond)
	if got := gather(t, reg).sum("lockscope_stream_gap_entries_total"); got != gap {
		t.Errorf("lockscope_stream_gap_entries_total = %v after new entries, want still %v", got, gap)
	}
}

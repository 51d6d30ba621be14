package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// The goroutine redistest starts to reap each redis-server process it (re)starts.
var ignoreRedistest = goleak.IgnoreAnyFunction("github.com/lockscope/lockscope/internal/testkit/redistest.(*Server).Start.func1")

// everyEventType returns one event of each type with every field its type
// carries, keys made of awkward bytes.
func everyEventType(base int64) []event.Event {
	return []event.Event{
		{Type: event.Acquired, Key: "workflow:123", Owner: "api/host-1/42", Lease: "L1", TS: base, Wait: 1500 * time.Microsecond, TTL: 30 * time.Second, Attempts: 3, Fence: 17},
		{Type: event.Failed, Key: "<script>alert(1)</script>\n\"'%/?", Owner: "w", TS: base + 100, Wait: time.Second, Attempts: 9, Reason: event.ReasonTimeout, Holder: "other"},
		{Type: event.Released, Key: string([]byte{0xff, 0xfe, 'k', 0}), Owner: "o", Lease: "L1", TS: base - 1_000_000, Hold: 2 * time.Minute},
		{Type: event.Renewed, Key: "r", Owner: "o", Lease: "L2", TS: base + 5, TTL: 10 * time.Second, Fence: 1 << 40,
			TraceID: event.TraceID{0: 1, 15: 2}, SpanID: event.SpanID{7: 3}, Headroom: 6500 * time.Millisecond},
		{Type: event.RenewFailed, Key: "r", Owner: "o", Lease: "L2", TS: base + 6, Reason: event.ReasonError},
		{Type: event.Lost, Key: "r", Owner: "o", Lease: "L2", TS: base + 7, Hold: time.Hour, Reason: event.ReasonNotOwner},
		{Type: event.Expired, Key: "e", Owner: "py/1", TS: base + 8, Hold: 3 * time.Second, Passive: true},
		{Type: event.Forced, Key: strings.Repeat("k", 10_000), Owner: "old", Lease: "L3", By: "alice", Reason: "stuck since lunch", TS: base + 9, Hold: time.Hour},
		{Type: event.Acquired, Key: "d", Owner: "o", TS: base + 10, Degraded: true, TraceID: event.TraceID{0: 9}},
	}
}

func closeEmitter(t *testing.T, e *Emitter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatalf("Close = %v, want nil", err)
	}
}

func TestEmitterWritesEveryFieldToStream(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	e := NewEmitter(rdb, &EmitterOptions{Stream: stream})
	want := everyEventType(time.Now().UnixNano())
	for _, ev := range want {
		e.Record(ev)
	}
	closeEmitter(t, e)

	read := redistest.ReadStream(t, rdb, stream)
	msgs, got := read.Entries, read.Events
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events read back from %q (-want +got):\n%s", stream, d)
	}
	// Packed entries only: v, n, batch, and x for the events' optional
	// fields (two of them carry trace ids or headroom).
	for _, m := range msgs {
		if len(m.Values) != 4 || m.Values[event.FieldVersion] != "1" || m.Values[event.FieldBatch] == nil || m.Values[event.FieldExt] == nil {
			t.Errorf("entry %s has fields %v, want v=1, n, batch, x", m.ID, keys(m.Values))
		}
	}
	st := e.Stats()
	if wantSt := (EmitterStats{Recorded: 9, Sent: 9, Batches: uint64(len(msgs))}); st != wantSt {
		t.Errorf("Stats() = %+v, want %+v", st, wantSt)
	}
}

func keys(m map[string]any) []string {
	var k []string
	for name := range m {
		k = append(k, name)
	}
	return k
}

func TestEmitterOneXADDPerBatch(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	const n, batch = 2000, 100
	e := NewEmitter(rdb, &EmitterOptions{Stream: stream, BatchSize: batch})
	var want []event.Event
	ts := time.Now().UnixNano()
	for i := range n {
		ev := event.Event{Type: event.Acquired, Key: "k" + strconv.Itoa(i), Owner: "o", TS: ts + int64(i), Attempts: 1}
		want = append(want, ev)
		e.Record(ev)
	}
	closeEmitter(t, e)

	read := redistest.ReadStream(t, rdb, stream)
	msgs, got := read.Entries, read.Events
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("events read back (-want +got):\n%s", d)
	}
	st := e.Stats()
	if st.Batches != uint64(len(msgs)) {
		t.Errorf("Stats().Batches = %d, stream entries = %d: want one entry per batch", st.Batches, len(msgs))
	}
	if len(msgs) < n/batch || len(msgs) >= n {
		t.Errorf("%d events went into %d entries, want between %d and %d", n, len(msgs), n/batch, n-1)
	}
	for _, m := range msgs {
		c, _ := strconv.Atoi(m.Values[event.FieldCount].(string))
		if c < 1 || c > batch {
			t.Errorf("entry %s holds n=%d events, want 1..%d", m.ID, c, batch)
		}
	}
	if st.Sent != n || st.Recorded != n || st.Dropped != 0 || st.Errors != 0 {
		t.Errorf("Stats() = %+v, want Recorded=Sent=%d and no drops or errors", st, n)
	}
}

func TestEmitterFlushesByInterval(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	e := NewEmitter(rdb, &EmitterOptions{Stream: stream, FlushInterval: 20 * time.Millisecond})
	defer closeEmitter(t, e)
	want := event.Event{Type: event.Renewed, Key: "alone", Owner: "o", TS: time.Now().UnixNano(), TTL: time.Second}
	e.Record(want)

	var got []event.Event
	redistest.WaitFor(t, 15*time.Second, "the event to be flushed without Flush, Close or a full batch", func() bool {
		got = redistest.ReadStream(t, rdb, stream).Events
		return len(got) > 0
	})
	if d := cmp.Diff([]event.Event{want}, got); d != "" {
		t.Errorf("events read back (-want +got):\n%s", d)
	}
	// The interval keeps working after the first flush.
	e.Record(want)
	redistest.WaitFor(t, 15*time.Second, "the second event", func() bool {
		got = redistest.ReadStream(t, rdb, stream).Events
		return len(got) == 2
	})
}

func TestEmitterCloseFlushes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), ignoreRedistest)
	srv := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	stream := redistest.KeyPrefix(t) + "events"
	e := NewEmitter(rdb, &EmitterOptions{Stream: stream})
	want := everyEventType(time.Now().UnixNano())[:5]
	for _, ev := range want {
		e.Record(ev)
	}
	closeEmitter(t, e)
	// No polling: Close returns only after the write.
	if got := redistest.ReadStream(t, rdb, stream).Events; !cmp.Equal(want, got) {
		t.Errorf("after Close the stream holds %d events, want the %d recorded:\n%s", len(got), len(want), cmp.Diff(want, got))
	}

	// Closed: Record drops and counts, Flush and Close have nothing to do.
	e.Record(want[0])
	if err := e.Flush(context.Background()); err != nil {
		t.Errorf("Flush after Close = %v, want nil", err)
	}
	closeEmitter(t, e)
	if st, wantSt := e.Stats(), (EmitterStats{Recorded: 6, Sent: 5, Dropped: 1, Batches: 1}); st != wantSt {
		t.Errorf("Stats() = %+v, want %+v", st, wantSt)
	}
	if got := redistest.ReadStream(t, rdb, stream).Events; len(got) != 5 {
		t.Errorf("stream holds %d events after Record on a closed emitter, want 5", len(got))
	}
}

func TestEmitterFlush(t *testing.T) {
	sink := &MemorySink{}
	e := NewEmitter(nil, &EmitterOptions{Sink: sink})
	defer closeEmitter(t, e)
	want := everyEventType(1_700_000_000_000_000_000)
	for _, ev := range want {
		e.Record(ev)
	}
	if err := e.Flush(context.Background()); err != nil {
		t.Fatalf("Flush = %v, want nil", err)
	}
	if d := cmp.Diff(want, sink.Events()); d != "" {
		t.Errorf("sink after Flush (-want +got):\n%s", d)
	}
}

func TestEmitterRedisDown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), ignoreRedistest)
	srv := redistest.Start(t, redistest.Options{Notify: "none"})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	const stream = "lockscope:events"
	e := NewEmitter(rdb, &EmitterOptions{Owner: "emitter-test", FlushInterval: 20 * time.Millisecond, BufferSize: 1000, BatchSize: 100})
	ctx := context.Background()

	ts := time.Now().UnixNano()
	for i := range 10 {
		e.Record(event.Event{Type: event.Acquired, Key: "before", TS: ts + int64(i)})
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatalf("Flush with Redis up = %v", err)
	}

	srv.Stop()
	const n = 100_000
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := range n {
			e.Record(event.Event{Type: event.Released, Key: "during", TS: ts + int64(i), Hold: time.Millisecond})
		}
	}()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d Record calls with Redis stopped did not return within 30s: Record blocks", n)
	}
	// Buffer overflow drops at once; what was buffered is dropped when the
	// writes fail.
	redistest.WaitFor(t, 10*time.Second, "every event recorded while Redis is down to be counted dropped", func() bool {
		return e.Stats().Dropped == n
	})
	st := e.Stats()
	if st.Recorded != n+10 || st.Sent != 10 || st.Errors == 0 {
		t.Errorf("Stats() with Redis down = %+v, want Recorded=%d Sent=10 Errors>0", st, n+10)
	}

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var got []event.Event
	redistest.WaitFor(t, 10*time.Second, "a dropped report after Redis is back", func() bool {
		got = redistest.ReadStream(t, rdb, stream).Events
		return len(got) > 0
	})
	want := []event.Event{{Type: event.Dropped, Owner: "emitter-test", Count: n}}
	if d := cmp.Diff(want, got, ignoreTS); d != "" {
		t.Errorf("stream after Redis came back (-want +got):\n%s", d)
	}
	if got[0].TS < ts {
		t.Errorf("dropped report TS = %d, before the test started (%d)", got[0].TS, ts)
	}

	// Reported once: the next batch carries no second report.
	e.Record(event.Event{Type: event.Acquired, Key: "after", TS: ts})
	closeEmitter(t, e)
	if got = redistest.ReadStream(t, rdb, stream).Events; len(got) != 2 || got[1].Key != "after" {
		t.Errorf("stream after Close holds %+v, want the report and event %q", got, "after")
	}
	st = e.Stats()
	if st.Recorded != st.Sent+st.Dropped || st.Sent != 11 {
		t.Errorf("Stats() after Close = %+v, want Sent=11 and Recorded=Sent+Dropped", st)
	}
}

var ignoreTS = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".TS" }, cmp.Ignore())

// blockingSink holds every Write until release is closed: the stand-in for a
// slow Redis, so the emitter's buffer fills.
type blockingSink struct {
	MemorySink
	entered chan struct{} // receives once per Write
	release chan struct{}
}

func (s *blockingSink) Write(ctx context.Context, events []event.Event) error {
	s.entered <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.MemorySink.Write(ctx, events)
}

func TestEmitterDropsWhenBufferFull(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), ignoreRedistest)
	sink := &blockingSink{entered: make(chan struct{}, 100), release: make(chan struct{})}
	e := NewEmitter(nil, &EmitterOptions{Sink: sink, BufferSize: 100, BatchSize: 10, WriteTimeout: time.Minute, Owner: "me"})
	ev := func(i int) event.Event {
		return event.Event{Type: event.Acquired, Key: strconv.Itoa(i), TS: int64(i + 1)}
	}
	for i := range 10 {
		e.Record(ev(i))
	}
	<-sink.entered // the writer holds the first 10 events and is stuck
	for i := 10; i < 210; i++ {
		e.Record(ev(i))
	}
	// 10 in flight + 90 buffered fill the buffer of 100; the other 110 drop.
	if st, want := e.Stats(), (EmitterStats{Recorded: 210, Dropped: 110}); st != want {
		t.Errorf("Stats() with a stuck sink = %+v, want %+v", st, want)
	}
	close(sink.release)
	closeEmitter(t, e)

	var want []event.Event
	for i := range 100 {
		want = append(want, ev(i))
	}
	got := sink.Events()
	var reports []event.Event
	var rest []event.Event
	for _, g := range got {
		if g.Type == event.Dropped {
			reports = append(reports, g)
		} else {
			rest = append(rest, g)
		}
	}
	if d := cmp.Diff(want, rest); d != "" {
		t.Errorf("events written (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]event.Event{{Type: event.Dropped, Owner: "me", Count: 110}}, reports, ignoreTS); d != "" {
		t.Errorf("dropped reports (-want +got):\n%s", d)
	}
	if st, want := e.Stats(), (EmitterStats{Recorded: 210, Sent: 100, Dropped: 110, Batches: uint64(sink.Writes())}); st != want {
		t.Errorf("Stats() after Close = %+v, want %+v", st, want)
	}
}

// failingSink fails every Write until ok is set.
type failingSink struct {
	MemorySink
	fail chan bool // current mode, cap 1
}

var errSinkDown = errors.New("sink down")

func (s *failingSink) Write(ctx context.Context, events []event.Event) error {
	fail := <-s.fail
	s.fail <- fail
	if fail {
		return errSinkDown
	}
	return s.MemorySink.Write(ctx, events)
}

func (s *failingSink) set(fail bool) { <-s.fail; s.fail <- fail }

func TestEmitterFlushReportsSinkError(t *testing.T) {
	sink := &failingSink{fail: make(chan bool, 1)}
	sink.fail <- true
	e := NewEmitter(nil, &EmitterOptions{Sink: sink, BatchSize: 4})
	defer closeEmitter(t, e)
	for i := range 10 {
		e.Record(event.Event{Type: event.Acquired, Key: "k", TS: int64(i + 1)})
	}
	if err := e.Flush(context.Background()); !errors.Is(err, errSinkDown) {
		t.Fatalf("Flush with a failing sink = %v, want %v", err, errSinkDown)
	}
	st := e.Stats()
	if st.Dropped != 10 || st.Sent != 0 || st.Errors == 0 || st.Batches != 0 {
		t.Errorf("Stats() after a failed Flush = %+v, want Dropped=10 Sent=0 Errors>0 Batches=0", st)
	}

	sink.set(false)
	e.Record(event.Event{Type: event.Released, Key: "k", TS: 100})
	if err := e.Flush(context.Background()); err != nil {
		t.Fatalf("Flush after the sink recovered = %v", err)
	}
	want := []event.Event{{Type: event.Dropped, Count: 10}, {Type: event.Released, Key: "k", TS: 100}}
	if d := cmp.Diff(want, sink.Events(), ignoreTS); d != "" {
		t.Errorf("events after recovery (-want +got):\n%s", d)
	}
}

func TestEmitterDropsOversizedEvents(t *testing.T) {
	sink := &MemorySink{}
	e := NewEmitter(nil, &EmitterOptions{Sink: sink})
	ok := event.Event{Type: event.Acquired, Key: strings.Repeat("k", event.MaxStringLen), TS: 1}
	e.Record(ok)
	e.Record(event.Event{Type: event.Acquired, Key: strings.Repeat("k", event.MaxStringLen+1), TS: 2})
	e.Record(event.Event{Type: event.Forced, Key: "k", Reason: strings.Repeat("r", event.MaxStringLen+1), TS: 3})
	closeEmitter(t, e)
	got := sink.Events()
	want := []event.Event{ok, {Type: event.Dropped, Count: 2}}
	if len(got) > 0 && got[0].Type == event.Dropped {
		want = []event.Event{want[1], want[0]}
	}
	if d := cmp.Diff(want, got, ignoreTS); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	if st := e.Stats(); st.Dropped != 2 || st.Sent != 1 {
		t.Errorf("Stats() = %+v, want Dropped=2 Sent=1", st)
	}
}

func TestEmitterCloseHonoursContext(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), ignoreRedistest)
	sink := &blockingSink{entered: make(chan struct{}, 10), release: make(chan struct{})}
	e := NewEmitter(nil, &EmitterOptions{Sink: sink, WriteTimeout: time.Minute})
	e.Record(event.Event{Type: event.Acquired, Key: "k", TS: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := e.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a stuck sink = %v, want %v", err, context.DeadlineExceeded)
	}
	// The writer gave up with Close's context: the goroutine ends (goleak
	// checks) and a later Close reports how the final flush ended.
	if err := e.Close(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second Close = %v, want %v", err, context.DeadlineExceeded)
	}
	if st := e.Stats(); st.Dropped != 1 || st.Sent != 0 {
		t.Errorf("Stats() = %+v, want Dropped=1 Sent=0", st)
	}
}

func TestEmitterConcurrentRecord(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), ignoreRedistest)
	sink := &MemorySink{}
	e := NewEmitter(nil, &EmitterOptions{Sink: sink, BatchSize: 64})
	const writers, each = 8, 1000
	done := make(chan struct{})
	for w := range writers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range each {
				e.Record(event.Event{Type: event.Acquired, Key: fmt.Sprint(w), Attempts: i, TS: 1})
			}
		}()
	}
	for range writers {
		<-done
	}
	closeEmitter(t, e)
	next := make([]int, writers)
	for _, g := range sink.Events() {
		w, _ := strconv.Atoi(g.Key)
		if g.Attempts != next[w] {
			t.Fatalf("writer %d: event %d arrived when %d was expected (lost or reordered)", w, g.Attempts, next[w])
		}
		next[w]++
	}
	for w, n := range next {
		if n != each {
			t.Errorf("writer %d: %d events arrived, want %d", w, n, each)
		}
	}
	if st := e.Stats(); st.Sent != writers*each || st.Dropped != 0 {
		t.Errorf("Stats() = %+v, want Sent=%d Dropped=0", st, writers*each)
	}
}

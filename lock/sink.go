package lock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
)

// Sink is where an Emitter writes its batches. Write is called from the
// emitter's goroutine only, with events it must not keep after returning:
// the emitter reuses the slice. An error means the whole batch is lost; the
// emitter counts it as dropped and does not retry it.
type Sink interface {
	Write(ctx context.Context, events []event.Event) error
}

// StreamTrim is how a sink trims the stream as it writes: to about MaxLen
// entries (XADD ... MAXLEN ~), or else to the entries at most MaxAge old
// (XADD ... MINID ~), by event.Retention's rule: the age is measured on
// Redis's clock (TIME), never on an entry ID another writer may have chosen
// nor on this client's clock, and a stream with an ID in the future keeps
// event.RetentionAheadKeep entries after it. The zero value never trims.
// "~" lets Redis trim only whole internal nodes (100 entries by default),
// which is cheap; so a stream keeps a little more than asked.
type StreamTrim struct {
	MaxLen int64
	MaxAge time.Duration
}

// StreamSink writes each batch as one packed entry (see docs/events.md) to a
// Redis stream, trimmed as its StreamTrim says. It is safe for concurrent
// use.
type StreamSink struct {
	rdb    redis.UniversalClient
	stream string
	trim   StreamTrim
	ret    *event.Retention // MaxAge's rule; nil when trimming by length or never
	bufs   sync.Pool        // *packBuf, reused only after a write succeeded
}

var _ Sink = (*StreamSink)(nil)

// NewStreamSink returns a sink writing to stream ("" means
// event.DefaultStream), trimmed to about maxLen entries (0 or less: never
// trimmed). Note that maxLen counts entries, and one entry holds a batch of
// up to thousands of events: NewStreamSinkTrim can trim by age instead.
func NewStreamSink(rdb redis.UniversalClient, stream string, maxLen int64) *StreamSink {
	return NewStreamSinkTrim(rdb, stream, StreamTrim{MaxLen: maxLen})
}

// NewStreamSinkTrim returns a sink writing to stream ("" means
// event.DefaultStream), trimmed as trim says.
func NewStreamSinkTrim(rdb redis.UniversalClient, stream string, trim StreamTrim) *StreamSink {
	if stream == "" {
		stream = event.DefaultStream
	}
	return &StreamSink{rdb: rdb, stream: stream, trim: trim, ret: retention(trim)}
}

// retention is trim's age rule, nil when it trims by length or never.
func retention(trim StreamTrim) *event.Retention {
	if trim.MaxLen > 0 || trim.MaxAge <= 0 {
		return nil
	}
	return event.NewRetention(trim.MaxAge)
}

// syncClock asks Redis for its time when rules need it (event.SyncClock).
func syncClock(ctx context.Context, rdb redis.UniversalClient, rules ...*event.Retention) {
	event.SyncClock(func() (time.Time, error) { return rdb.Time(ctx).Result() }, rules...)
}

// Stream returns the stream key the sink writes to.
func (s *StreamSink) Stream() string { return s.stream }

// Write sends events with one XADD. Only a batch over event.EntryBytes of
// encoding or event.MaxBatchEvents events is split over several entries.
// Events must respect event.MaxStringLen; the Emitter drops those that do
// not before they reach a sink.
func (s *StreamSink) Write(ctx context.Context, events []event.Event) error {
	if len(events) == 0 {
		return nil
	}
	pb, _ := s.bufs.Get().(*packBuf)
	if pb == nil {
		pb = new(packBuf)
	}
	pb.reset()
	pb.pack(events)
	for _, e := range pb.entries {
		if err := s.xadd(ctx, e.n, pb.b[e.start:e.end], pb.x[e.xstart:e.xend]); err != nil {
			return err
		}
	}
	s.bufs.Put(pb) // only after every write succeeded: go-redis keeps nothing after a reply
	return nil
}

func (s *StreamSink) xadd(ctx context.Context, n int, batch, ext []byte) error {
	if s.ret != nil {
		syncClock(ctx, s.rdb, s.ret)
	}
	id, err := s.rdb.XAdd(ctx, xaddArgs(s.stream, s.trim, s.ret, n, batch, ext)).Result()
	if err != nil {
		return fmt.Errorf("lock: XADD %d events to %q: %w", n, s.stream, err)
	}
	s.ret.Written(id)
	return nil
}

// xaddArgs is the XADD of one packed entry to stream, trimmed as trim says
// (by age: as ret, the stream's rule, says now).
func xaddArgs(stream string, trim StreamTrim, ret *event.Retention, n int, batch, ext []byte) *redis.XAddArgs {
	a := &redis.XAddArgs{
		Stream: stream,
		Approx: true,
		Values: event.PackedEntry(n, batch, ext),
	}
	switch {
	case trim.MaxLen > 0:
		a.MaxLen = trim.MaxLen
	case ret != nil:
		a.MinID = ret.MinID(time.Now())
	}
	return a
}

// packBuf holds packed entries: one buffer of batches and one of their
// extensions (the events' optional fields), and where each entry lies in
// them.
type packBuf struct {
	b, x    []byte
	entries []packedEntry
}

type packedEntry struct{ start, end, xstart, xend, n int }

func (pb *packBuf) reset() { pb.b, pb.x, pb.entries = pb.b[:0], pb.x[:0], pb.entries[:0] }

// pack appends events as packed entries, starting a new entry where one
// would pass event.EntryBytes or event.MaxBatchEvents.
func (pb *packBuf) pack(events []event.Event) {
	if len(events) == 0 {
		return
	}
	start, xstart, first := len(pb.b), len(pb.x), 0
	var prev int64
	for i := range events {
		mark, xmark := len(pb.b), len(pb.x)
		pb.b = event.AppendPacked(pb.b, &events[i], prev)
		pb.x = event.AppendExt(pb.x, i-first, &events[i])
		if i > first && (len(pb.b)-start > event.EntryBytes || i-first == event.MaxBatchEvents) {
			// Events i... start the next entry, with TS deltas restarting
			// from 0 and extension indexes from the entry's first event:
			// re-encode event i after the entry just closed.
			pb.entries = append(pb.entries, packedEntry{start, mark, xstart, xmark, i - first})
			pb.b = event.AppendPacked(pb.b[:mark], &events[i], 0)
			pb.x = event.AppendExt(pb.x[:xmark], 0, &events[i])
			start, xstart, first = mark, xmark, i
		}
		prev = events[i].TS
	}
	pb.entries = append(pb.entries, packedEntry{start, len(pb.b), xstart, len(pb.x), len(events) - first})
}

// MemorySink keeps every event written to it, for tests (yours and ours). It
// is safe for concurrent use.
type MemorySink struct {
	mu     sync.Mutex
	events []event.Event
	writes int
}

var _ Sink = (*MemorySink)(nil)

// Write appends a copy of events.
func (m *MemorySink) Write(_ context.Context, events []event.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, events...)
	m.writes++
	return nil
}

// Events returns a snapshot of the events written so far, in write order.
func (m *MemorySink) Events() []event.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]event.Event(nil), m.events...)
}

// Writes returns how many batches were written.
func (m *MemorySink) Writes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writes
}

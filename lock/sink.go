package lock

import (
	"context"
	"fmt"
	"sync"

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

// StreamSink writes each batch as one packed entry (see docs/events.md) to a
// Redis stream with XADD ... MAXLEN ~ n. It is safe for concurrent use.
type StreamSink struct {
	rdb    redis.UniversalClient
	stream string
	maxLen int64
	bufs   sync.Pool // *[]byte, reused only after a write succeeded
}

var _ Sink = (*StreamSink)(nil)

// NewStreamSink returns a sink writing to stream ("" means
// event.DefaultStream), trimmed to about maxLen entries (0 or less: never
// trimmed). Note that maxLen counts entries, and one entry holds a batch.
func NewStreamSink(rdb redis.UniversalClient, stream string, maxLen int64) *StreamSink {
	if stream == "" {
		stream = event.DefaultStream
	}
	return &StreamSink{rdb: rdb, stream: stream, maxLen: maxLen}
}

// Stream returns the stream key the sink writes to.
func (s *StreamSink) Stream() string { return s.stream }

// Write sends events with one XADD. Only a batch that would break the
// decoder's limits (event.MaxBatchEvents, event.MaxBatchBytes) is split over
// several entries. Events must respect event.MaxStringLen; the Emitter drops
// those that do not before they reach a sink.
func (s *StreamSink) Write(ctx context.Context, events []event.Event) error {
	if len(events) == 0 {
		return nil
	}
	bp, _ := s.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	b := (*bp)[:0]
	var prev int64
	first := 0
	for i := range events {
		mark := len(b)
		b = event.AppendPacked(b, &events[i], prev)
		if i > first && (len(b) > event.MaxBatchBytes || i-first == event.MaxBatchEvents) {
			// Events i... start the next entry, with TS deltas restarting from 0.
			if err := s.xadd(ctx, i-first, b[:mark]); err != nil {
				return err
			}
			first = i
			b = event.AppendPacked(b[:0], &events[i], 0)
		}
		prev = events[i].TS
	}
	if err := s.xadd(ctx, len(events)-first, b); err != nil {
		return err
	}
	*bp = b[:0]
	s.bufs.Put(bp)
	return nil
}

func (s *StreamSink) xadd(ctx context.Context, n int, batch []byte) error {
	err := s.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: s.stream,
		MaxLen: s.maxLen,
		Approx: true,
		Values: event.PackedFields(n, batch),
	}).Err()
	if err != nil {
		return fmt.Errorf("lock: XADD %d events to %q: %w", n, s.stream, err)
	}
	return nil
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

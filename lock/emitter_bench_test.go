package lock

import (
	"context"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// A benchmark loop records tens of millions of events a second, far more than
// any lock workload and more than any sink drains, so left alone the buffer
// fills and Record measures its drop path. The benchmarks therefore Flush
// every flushEvery events, as the writer would at a realistic rate.
const flushEvery = 256

// discardSink accepts every batch: the emitter's cost without Redis's.
type discardSink struct{}

func (discardSink) Write(context.Context, []event.Event) error { return nil }

func benchEvent() event.Event {
	return event.Event{Type: event.Acquired, Key: "workflow:123", Owner: "api/host-1/42", Lease: "0123456789abcdef",
		TS: time.Now().UnixNano(), Wait: time.Millisecond, TTL: 30 * time.Second, Attempts: 1}
}

func streamOptions(b *testing.B) *EmitterOptions {
	rdb := redistest.Shared(b).Client(b)
	return &EmitterOptions{Sink: NewStreamSink(rdb, redistest.KeyPrefix(b)+"events", 10_000)}
}

func flush(b *testing.B, e *Emitter) {
	if err := e.Flush(context.Background()); err != nil {
		b.Fatalf("Flush = %v", err)
	}
}

func closeAndReport(b *testing.B, e *Emitter) {
	b.StopTimer()
	if err := e.Close(context.Background()); err != nil {
		b.Fatalf("Close = %v", err)
	}
	st := e.Stats()
	b.ReportMetric(float64(st.Dropped)/float64(st.Recorded), "drops/op")
}

// BenchmarkEmitterRecord measures one goroutine recording:
//   - accept: Record alone (the timer is stopped while the writer catches up);
//   - discard: Record plus its share of the writer's work, to a no-op sink;
//   - stream: Record plus its share of packed XADDs to a real Redis;
//   - full: Record when the buffer is full and the event is dropped.
func BenchmarkEmitterRecord(b *testing.B) {
	ev := benchEvent()
	b.Run("accept", func(b *testing.B) {
		e := NewEmitter(nil, &EmitterOptions{Sink: discardSink{}})
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			e.Record(ev)
			if i++; i%flushEvery == 0 {
				b.StopTimer()
				flush(b, e)
				b.StartTimer()
			}
		}
		closeAndReport(b, e)
	})
	for _, s := range []struct {
		name string
		opt  func(*testing.B) *EmitterOptions
	}{
		{"discard", func(*testing.B) *EmitterOptions { return &EmitterOptions{Sink: discardSink{}} }},
		{"stream", streamOptions},
	} {
		b.Run(s.name, func(b *testing.B) {
			e := NewEmitter(nil, s.opt(b))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				e.Record(ev)
				if i++; i%flushEvery == 0 {
					flush(b, e)
				}
			}
			closeAndReport(b, e)
		})
	}
	b.Run("full", func(b *testing.B) {
		sink := &blockingSink{entered: make(chan struct{}, 1), release: make(chan struct{})}
		e := NewEmitter(nil, &EmitterOptions{Sink: sink, BufferSize: 1, BatchSize: 1, WriteTimeout: time.Hour})
		e.Record(ev)
		<-sink.entered
		b.ReportAllocs()
		for b.Loop() {
			e.Record(ev)
		}
		b.StopTimer()
		close(sink.release)
		closeAndReport(b, e)
	})
}

// BenchmarkEmitterRecordParallel is BenchmarkEmitterRecord's discard and
// stream cases with GOMAXPROCS goroutines recording at once.
func BenchmarkEmitterRecordParallel(b *testing.B) {
	for _, s := range []struct {
		name string
		opt  func(*testing.B) *EmitterOptions
	}{
		{"discard", func(*testing.B) *EmitterOptions { return &EmitterOptions{Sink: discardSink{}} }},
		{"stream", streamOptions},
	} {
		b.Run(s.name, func(b *testing.B) {
			e := NewEmitter(nil, s.opt(b))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ev := benchEvent()
				i := 0
				for pb.Next() {
					e.Record(ev)
					if i++; i%flushEvery == 0 {
						flush(b, e)
					}
				}
			})
			closeAndReport(b, e)
		})
	}
}

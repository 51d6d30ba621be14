package lock

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
)

// PartitionedStreamSink spreads each batch by lock key over the partition
// streams of event.Streams(stream, n): every event of one key goes to the
// same partition, in order. The entries of one batch are written in one
// pipeline (on a Cluster, go-redis sends one pipeline per master). A failed
// write loses the whole batch, as with StreamSink; entries of the partitions
// that succeeded stay written, so the emitter's dropped count may count a
// few events that did arrive.
type PartitionedStreamSink struct {
	rdb     redis.UniversalClient
	streams []string
	trim    StreamTrim
	rets    []*event.Retention // per partition: its age rule (nil: by length or never)

	mu    sync.Mutex // one Write at a time: the buffers below are reused
	parts [][]event.Event
	pb    packBuf
	ends  []int // pb.entries index ending each partition's entries
}

var _ Sink = (*PartitionedStreamSink)(nil)

// NewPartitionedStreamSink returns a sink writing to n partitions of stream
// ("" means event.DefaultStream), each trimmed to about maxLen entries (0
// or less: never trimmed). n <= 1 writes to stream itself, like StreamSink.
func NewPartitionedStreamSink(rdb redis.UniversalClient, stream string, n int, maxLen int64) *PartitionedStreamSink {
	return NewPartitionedStreamSinkTrim(rdb, stream, n, StreamTrim{MaxLen: maxLen})
}

// NewPartitionedStreamSinkTrim returns a sink writing to n partitions of
// stream ("" means event.DefaultStream), each trimmed as trim says (by
// age: each partition by its own event.Retention, on Redis's clock).
func NewPartitionedStreamSinkTrim(rdb redis.UniversalClient, stream string, n int, trim StreamTrim) *PartitionedStreamSink {
	streams := event.Streams(stream, n)
	rets := make([]*event.Retention, len(streams))
	for i := range rets {
		rets[i] = retention(trim)
	}
	return &PartitionedStreamSink{rdb: rdb, streams: streams, trim: trim, rets: rets, parts: make([][]event.Event, len(streams))}
}

// Streams returns the partition stream keys, in partition order.
func (s *PartitionedStreamSink) Streams() []string { return s.streams }

// Write sends the events of each partition as packed entries, all in one
// pipeline.
func (s *PartitionedStreamSink) Write(ctx context.Context, events []event.Event) error {
	if len(events) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.streams)
	for p := range s.parts {
		s.parts[p] = s.parts[p][:0]
	}
	for i := range events {
		p := event.PartitionOf(events[i].Key, n)
		s.parts[p] = append(s.parts[p], events[i])
	}
	// Pack everything first: the pipeline keeps slices of pb.b until Exec,
	// so pb.b must not grow (and move) once the first entry is queued.
	s.pb.reset()
	s.ends = s.ends[:0]
	for p := range s.parts {
		s.pb.pack(s.parts[p])
		s.ends = append(s.ends, len(s.pb.entries))
	}
	if s.rets[0] != nil {
		syncClock(ctx, s.rdb, s.rets...)
	}
	pipe := s.rdb.Pipeline()
	e := 0
	for p, end := range s.ends {
		for ; e < end; e++ {
			en := s.pb.entries[e]
			pipe.XAdd(ctx, xaddArgs(s.streams[p], s.trim, s.rets[p], en.n, s.pb.b[en.start:en.end], s.pb.x[en.xstart:en.xend]))
		}
	}
	cmds, err := pipe.Exec(ctx)
	// The IDs Redis gave each partition, whatever else failed.
	e = 0
	for p, end := range s.ends {
		for ; e < end && e < len(cmds); e++ {
			if c, ok := cmds[e].(*redis.StringCmd); ok && c.Err() == nil {
				s.rets[p].Written(c.Val())
			}
		}
	}
	if err != nil {
		for _, c := range cmds {
			if c.Err() != nil {
				return fmt.Errorf("lock: XADD to %v (batch of %d events over %d partitions): %w", c.Args()[1], len(events), n, c.Err())
			}
		}
		return fmt.Errorf("lock: XADD %d events to %d partitions: %w", len(events), n, err)
	}
	for p := range s.parts {
		clear(s.parts[p]) // drop the strings: the sink must not keep events
	}
	return nil
}

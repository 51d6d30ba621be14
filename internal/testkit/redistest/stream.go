package redistest

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
)

// Stream is what ReadStream found on a stream.
type Stream struct {
	Entries   []redis.XMessage // every entry, oldest first
	Events    []event.Event    // the events they carry, in order
	Malformed int              // entries that did not decode (not in Events)
}

// ReadStream reads every entry of stream, a page at a time, and decodes it.
func ReadStream(tb testing.TB, rdb redis.UniversalClient, stream string) Stream {
	tb.Helper()
	var s Stream
	start := "-"
	for {
		msgs, err := rdb.XRangeN(tb.Context(), stream, start, "+", 1000).Result()
		if err != nil {
			tb.Fatalf("XRANGE %s: %v", stream, err)
		}
		s.Entries = append(s.Entries, msgs...)
		for _, m := range msgs {
			evs, err := event.DecodeAppend(s.Events, m.Values)
			if err != nil {
				s.Malformed++
				continue
			}
			s.Events = evs
		}
		if len(msgs) < 1000 {
			return s
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

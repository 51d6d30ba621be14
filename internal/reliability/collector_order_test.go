package reliability

import (
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector"
	"github.com/lockscope/lockscope/event"
)

// TestCollectorKeepsHoldAcrossReorderedEmitters replays, against the
// Aggregator with an injected clock, an ordering the paused-holder test
// (TestPausedHoldersWith*) met on the real stream: each application process
// has its own emitter, flushed every 100ms, so a hold's acquired event can
// reach the stream before an earlier hold's events from another process.
//
//	B (process 0) acquires at 440ms and releases at 470ms;
//	A (process 1) acquires at 500ms, TTL 100ms, then is paused: it never
//	renews or releases, and its key expires at 600ms.
//	Stream order: A.acquired, then B.acquired, B.released.
//
// B's late events describe a hold that ended before A's began. A still
// holds the key until 600ms, and then its TTL lapses while held: the
// collector must show A as the holder and count A's expiration.
func TestCollectorKeepsHoldAcrossReorderedEmitters(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	now := base
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	agg := collector.NewAggregator(collector.Config{Now: func() time.Time { return now }})
	const key = "job:1"
	ev := func(typ event.Type, lease, owner string, ms int, ttl time.Duration) event.Event {
		return event.Event{Type: typ, Key: key, Lease: lease, Owner: owner, TS: at(ms).UnixNano(), TTL: ttl}
	}

	now = at(520)
	agg.Apply([]event.Event{ev(event.Acquired, "A", "holder-1", 500, 100*time.Millisecond)})
	now = at(540)
	agg.Apply([]event.Event{
		ev(event.Acquired, "B", "holder-0", 440, 100*time.Millisecond),
		ev(event.Released, "B", "holder-0", 470, 0),
	})
	if l, ok := agg.Lock(key); !ok || !l.Held || l.Lease != "A" {
		t.Errorf("Lock(%q) after B's late events = held %v by lease %q, want held by A (acquired after B released)", key, l.Held, l.Lease)
	}
	for ms := 600; ms <= 3000; ms += 100 {
		now = at(ms)
		agg.Tick()
	}
	var leases []string
	for _, x := range agg.Expirations(0) {
		leases = append(leases, x.Lease)
	}
	if len(leases) != 1 || leases[0] != "A" {
		t.Errorf("Expirations() leases = %q, want [A]: A's TTL lapsed while held", leases)
	}
}

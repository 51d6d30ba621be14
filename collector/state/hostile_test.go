package state

import (
	"math"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// A TTL near the most a duration holds (292 years, as the wire's ttl in
// milliseconds allows) does not wrap the hold's expiry round to the past:
// the lock stays held, with its expiry at the latest time there is, and is
// never declared expired.
func TestTTLNearMaxDoesNotWrap(t *testing.T) {
	evs, err := event.Decode(map[string]any{"v": "1", "type": "acquired", "key": "k", "owner": "o", "lease": "L",
		"ts": "1767225600000000000", "ttl": "9223372036854"}) // aggT0, and MaxInt64/1e6 ms
	if err != nil {
		t.Fatal(err)
	}
	agg, clk := newTestAggregator(t, Config{})
	agg.Apply(evs)
	for _, d := range []time.Duration{time.Second, time.Hour, 24 * time.Hour} {
		clk.Set(aggT0.Add(d))
		agg.Tick()
		l, ok := agg.Lock("k")
		if !ok || !l.Held {
			t.Fatalf("%v after an acquisition with a TTL of %v: held = %v, want held", d, evs[0].TTL, l.Held)
		}
		if got, want := l.ExpiresAt.UnixNano(), int64(math.MaxInt64); got != want {
			t.Errorf("ExpiresAt = %v (%d), want the latest time there is (%d)", l.ExpiresAt, got, want)
		}
	}
	if n := tallyOf(agg).get("expirations", "k"); n != 0 {
		t.Errorf("expirations = %v, want 0", n)
	}
	if n := tallyOf(agg).observed("hold", "k"); n != 0 {
		t.Errorf("holds observed = %d, want 0: the hold has not ended", n)
	}
	// A renewal with such a TTL neither.
	agg.Apply([]event.Event{renewed("k", "o", "L", 24*time.Hour, evs[0].TTL)})
	clk.Set(aggT0.Add(48 * time.Hour))
	agg.Tick()
	if l, _ := agg.Lock("k"); !l.Held || l.ExpiresAt.UnixNano() != math.MaxInt64 {
		t.Errorf("after a renewal with a TTL of %v: held %v, expires %v; want held, expiring at the latest time", evs[0].TTL, l.Held, l.ExpiresAt)
	}
}

// A dropped event counts at most maxDroppedReport: a forged count of 2^63-1
// neither sets lockscope_events_dropped_total to 9.2e18 nor, twice, wraps
// the overview's sum negative.
func TestDroppedReportClamped(t *testing.T) {
	agg, _ := newTestAggregator(t, Config{})
	d := ev(event.Dropped, "", "", "", 0)
	d.Count = math.MaxInt64
	small := d
	small.Count = 42
	agg.Apply([]event.Event{d, d, small})
	want := int64(2*maxDroppedReport + 42)
	if got := tallyOf(agg).get("dropped", ""); got != float64(want) {
		t.Errorf("events_dropped_total = %v, want %v", got, float64(want))
	}
	if got := agg.Overview().Dropped; got != want {
		t.Errorf("Overview().Dropped = %d, want %d", got, want)
	}
	for range 1 << 14 { // 2^54 in all: the sum saturates, never wraps
		agg.Apply([]event.Event{d})
	}
	if got := agg.Overview().Dropped; got < want {
		t.Errorf("Overview().Dropped = %d after 2^14 more reports, want at least %d", got, want)
	}
}

// A released event that is not the holder's own (anyone who may XADD to the
// stream can send one) hides the lock only until the holder's next
// renewal, which a lease makes only while it holds the lock: the hold comes
// back with its true start. A renewal older than a genuine release (a
// duplicate entry) brings nothing back.
func TestRenewalAfterForgedReleaseRevivesTheHold(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{StuckAfter: 5 * time.Second})
	clk.Set(aggT0.Add(time.Minute))
	agg.Apply([]event.Event{
		acquired("k", "app", "L1", 0, 0, 1, 30*time.Second),
		ended(event.Released, "k", "app", "L1", 5*time.Second, 0, ""), // forged
	})
	if l, _ := agg.Lock("k"); l.Held {
		t.Fatal("held after the released event, want released")
	}
	agg.Apply([]event.Event{renewed("k", "app", "L1", 10*time.Second, 30*time.Second)})
	l, _ := agg.Lock("k")
	if !l.Held || l.Lease != "L1" || !l.Since.Equal(aggT0) {
		t.Fatalf("after the holder's renewal: held %v by %s since %v; want held by L1 since %v", l.Held, l.Lease, l.Since, aggT0)
	}
	if !l.Stuck {
		t.Errorf("a hold of 10 s with a stuck threshold of 5 s is not stuck after the revival: the revival kept its start")
	}
	// The revived hold ends for real: its hold time is observed, from its
	// true start (the forged release observed one too: counters keep what
	// they counted).
	agg.Apply([]event.Event{ended(event.Released, "k", "app", "L1", 40*time.Second, 0, "")})
	if l, _ := agg.Lock("k"); l.Held {
		t.Error("held after the holder's own release")
	}
	if n := tallyOf(agg).observed("hold", "k"); n != 2 {
		t.Errorf("holds observed = %d, want 2 (the forged release's and the real one)", n)
	}

	// A genuine release, then a renewal from before it applied late: a
	// duplicate, nothing comes back.
	agg.Apply([]event.Event{
		acquired("k", "app", "L2", 41*time.Second, 0, 1, 30*time.Second),
		ended(event.Released, "k", "app", "L2", 45*time.Second, 0, ""),
		renewed("k", "app", "L2", 44*time.Second, 30*time.Second),
	})
	if l, _ := agg.Lock("k"); l.Held {
		t.Errorf("held by %s after its release and a renewal from before it, want free", l.Lease)
	}
}

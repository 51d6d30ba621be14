package state

import (
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// TestAnExpirationIsOneLineOfTheTimeline: however an expiration is learnt
// (the holder's expired event, the TTL lapsing at a tick, a keyspace
// notification) and whichever word follows, the key's recent events show it
// once, and its hold is counted once.
func TestAnExpirationIsOneLineOfTheTimeline(t *testing.T) {
	const key, owner, lease = "orders:1", "worker/1", "l1"
	expiredEv := func(at time.Duration, passive bool) event.Event {
		e := ended(event.Expired, key, owner, lease, at, 0, "")
		e.Passive = passive
		return e
	}
	for _, tc := range []struct {
		name  string
		learn func(a *Aggregator, clk *aggClock)
	}{
		{"the holder's expired event", func(a *Aggregator, clk *aggClock) {
			a.Apply([]event.Event{expiredEv(3*time.Second, false)})
		}},
		{"the TTL lapses at a tick, then the expired event", func(a *Aggregator, clk *aggClock) {
			clk.Set(aggT0.Add(3 * time.Second))
			a.Tick()
			a.Apply([]event.Event{expiredEv(3*time.Second, false)})
		}},
		{"a keyspace notification, then the watcher's expired event", func(a *Aggregator, clk *aggClock) {
			clk.Set(aggT0.Add(2*time.Second + 100*time.Millisecond))
			a.KeyExpired(key)
			a.Apply([]event.Event{expiredEv(2*time.Second+100*time.Millisecond, true)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, clk := newTestAggregator(t, Config{})
			a.Apply([]event.Event{acquired(key, owner, lease, time.Second, 0, 1, 2*time.Second)})
			tc.learn(a, clk)
			clk.Set(aggT0.Add(5 * time.Second))
			a.Tick()
			d, ok := a.Lock(key)
			if !ok {
				t.Fatal("key not tracked")
			}
			var types []string
			for _, e := range d.Recent {
				types = append(types, e.Type.String())
			}
			if got := strings.Join(types, ","); got != "expired,acquired" {
				t.Errorf("timeline %s, want expired,acquired", got)
			}
			if d.Held || d.Hold.Count != 1 {
				t.Errorf("held %v, holds %d; want free with one hold", d.Held, d.Hold.Count)
			}
			var n float64
			for _, c := range a.Classes() {
				n += tallyOf(a).get("expirations", c)
			}
			if n != 1 {
				t.Errorf("expirations counted %v, want 1", n)
			}
		})
	}
}

// TestWaitingEventsKeepTheHolderSeen: a key's recent events give a waiting
// call's holder, as they do a failed one's.
func TestWaitingEventsKeepTheHolderSeen(t *testing.T) {
	a, _ := newTestAggregator(t, Config{})
	w := ev(event.Waiting, "orders:1", "api/2", "w1", time.Second)
	w.Holder = "worker/1"
	a.Apply([]event.Event{acquired("orders:1", "worker/1", "l1", 0, 0, 1, time.Minute), w})
	d, _ := a.Lock("orders:1")
	if len(d.Recent) != 2 || d.Recent[0].Type != event.Waiting || d.Recent[0].Holder != "worker/1" {
		t.Fatalf("recent = %+v, want the waiting event first with holder worker/1", d.Recent)
	}
}

package state

import (
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// A passively watched acquisition's wait is unknown (a failed SET NX makes
// no notification), not zero: it stays out of the wait histogram, the
// overview's wait figures and its contention ratio.
func TestPassiveAcquisitionsHaveNoKnownWait(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	// One instrumented acquisition that waited.
	agg.Apply([]event.Event{acquired("app:a", "svc", "l1", time.Second, 200*time.Millisecond, 3, time.Minute)})
	// Four passive ones (redis-py), whose waits nobody saw.
	for i := range 4 {
		e := acquired("py:b", "redis-py/redlock 1234abcd", "", time.Duration(2+i)*time.Second, 0, 1, time.Minute)
		e.Passive = true
		agg.Apply([]event.Event{e, ended(event.Released, "py:b", "redis-py/redlock 1234abcd", "", time.Duration(2+i)*time.Second+time.Millisecond, time.Millisecond, "")})
	}
	clk.Set(aggT0.Add(7 * time.Second))
	o := agg.Overview()
	if o.ContentionRatio != 1 {
		t.Errorf("ContentionRatio = %v, want 1 (one contended of one acquisition with a known wait)", o.ContentionRatio)
	}
	if o.WaitP99 < 100*time.Millisecond {
		t.Errorf("WaitP99 = %v, want the instrumented wait's bucket, not pulled down by unknown waits", o.WaitP99)
	}
	for _, class := range agg.Classes() {
		if n := tallyOf(agg).observed("wait", class); strings.HasPrefix(class, "py:") && n != 0 {
			t.Errorf("wait{class=%q} has %d samples, want none from passive acquisitions", class, n)
		}
	}
	d, ok := agg.Lock("py:b")
	if !ok || d.Wait.Count != 0 || d.Acquisitions != 4 {
		t.Errorf("Lock(py:b) wait count %d, acquisitions %d; want 0 and 4", d.Wait.Count, d.Acquisitions)
	}
}

// A forced release of another library's lock deletes the key: the watcher
// reports a passive release at once, the forced event follows through the
// stream. The two are one forced release, whichever comes first; a passive
// release nothing explains counts as a release once it has waited.
func TestForcedReleaseOfAWatchedLockCountsOnce(t *testing.T) {
	const owner = "redis-py/redlock 1234abcd"
	passive := func(typ event.Type, key string, at time.Duration) event.Event {
		e := ev(typ, key, owner, "", at)
		e.Passive, e.TTL, e.Attempts = true, time.Minute, 1
		if typ == event.Released {
			e.Hold = at - time.Second
		}
		return e
	}
	forced := func(key string, at time.Duration) event.Event {
		e := ev(event.Forced, key, owner, "", at)
		e.By, e.Reason = "ops", "hung"
		return e
	}
	counts := func(t *testing.T, agg *Aggregator, key string) (released, forcedN float64, types []string) {
		t.Helper()
		for _, class := range agg.Classes() {
			released += tallyOf(agg).get("releases_released", class)
			forcedN += tallyOf(agg).get("forced", class)
		}
		d, _ := agg.Lock(key)
		for _, e := range d.Recent {
			types = append(types, e.Type.String())
		}
		return released, forcedN, types
	}
	for _, tc := range []struct {
		name  string
		order func(key string) []event.Event
	}{
		{"watcher first", func(key string) []event.Event {
			return []event.Event{passive(event.Released, key, 3*time.Second), forced(key, 3*time.Second+50*time.Millisecond)}
		}},
		{"stream first", func(key string) []event.Event {
			return []event.Event{forced(key, 3*time.Second), passive(event.Released, key, 3*time.Second-time.Millisecond)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agg, clk := newTestAggregator(t, Config{})
			key := "py:job-1"
			agg.Apply([]event.Event{passive(event.Acquired, key, time.Second)})
			clk.Set(aggT0.Add(3 * time.Second))
			for _, e := range tc.order(key) {
				agg.Apply([]event.Event{e})
			}
			clk.Set(aggT0.Add(5 * time.Second))
			agg.Tick()
			released, forcedN, types := counts(t, agg, key)
			if released != 0 || forcedN != 1 || strings.Join(types, ",") != "forced,acquired" {
				t.Errorf("released %v, forced %v, timeline %v; want 0, 1, [forced acquired]", released, forcedN, types)
			}
			if d, _ := agg.Lock(key); d.Held {
				t.Error("still held after the forced release")
			}
		})
	}
	t.Run("a plain release waits, then counts", func(t *testing.T) {
		agg, clk := newTestAggregator(t, Config{})
		key := "py:job-2"
		agg.Apply([]event.Event{passive(event.Acquired, key, time.Second)})
		clk.Set(aggT0.Add(3 * time.Second))
		agg.Apply([]event.Event{passive(event.Released, key, 3*time.Second)})
		clk.Set(aggT0.Add(3*time.Second + parkFor))
		agg.Tick()
		released, forcedN, types := counts(t, agg, key)
		if released != 1 || forcedN != 0 || strings.Join(types, ",") != "released,acquired" {
			t.Errorf("released %v, forced %v, timeline %v; want 1, 0, [released acquired]", released, forcedN, types)
		}
		if d, _ := agg.Lock(key); d.Held || d.Hold.Count != 1 {
			t.Errorf("held %v, holds %d; want free with one hold", d.Held, d.Hold.Count)
		}
	})
	t.Run("a new holder follows the parked release", func(t *testing.T) {
		agg, clk := newTestAggregator(t, Config{})
		key := "py:job-3"
		agg.Apply([]event.Event{passive(event.Acquired, key, time.Second)})
		clk.Set(aggT0.Add(3 * time.Second))
		agg.Apply([]event.Event{passive(event.Released, key, 3*time.Second), passive(event.Acquired, key, 3*time.Second+time.Millisecond)})
		d, _ := agg.Lock(key)
		var types []string
		for _, e := range d.Recent {
			types = append(types, e.Type.String())
		}
		if !d.Held || d.Hold.Count != 1 || strings.Join(types, ",") != "acquired,released,acquired" {
			t.Errorf("held %v, holds %d, timeline %v; want the new hold after the old one's release", d.Held, d.Hold.Count, types)
		}
	})
}

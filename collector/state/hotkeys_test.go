package state

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lockscope/lockscope/collector/internal/evtest"
	"github.com/lockscope/lockscope/event"
)

func TestHotKeysExact(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	ms := time.Millisecond
	clk.Set(aggT0.Add(time.Second))
	var evs []event.Event
	evs = append(evs, evtest.Contend("q:1", 5, 10*ms, 0)...)
	evs = append(evs, evtest.Contend("q:2", 3, 100*ms, 0)...)
	evs = append(evs, evtest.Contend("q:3", 1, 2*time.Second, 0)...)
	evs = append(evs, acquired("q:1", "x", "y", 0, ms, 1, 0)) // uncontended
	evs = append(evs, failed("q:4", "z", 0, 3*ms, 1, event.ReasonHeld))
	evs = append(evs, failed("q:4", "z", 0, 4*ms, 1, event.ReasonHeld))
	a.Apply(evs)

	wantCont := []HotKey{
		{Key: "q:1", Class: "q:*", Contentions: 5, Wait: 51 * ms, Acquisitions: 6},
		{Key: "q:2", Class: "q:*", Contentions: 3, Wait: 300 * ms, Acquisitions: 3},
		{Key: "q:4", Class: "q:*", Contentions: 2, Wait: 7 * ms, Acquisitions: 0},
		{Key: "q:3", Class: "q:*", Contentions: 1, Wait: 2 * time.Second, Acquisitions: 1},
	}
	for _, w := range Windows {
		if diff := cmp.Diff(wantCont, a.HotKeys(w, ByContentions, 10)); diff != "" {
			t.Errorf("HotKeys(%v, contentions) (-want +got):\n%s", w, diff)
		}
	}
	wantWait := []HotKey{
		{Key: "q:3", Class: "q:*", Contentions: 1, Wait: 2 * time.Second, Acquisitions: 1},
		{Key: "q:2", Class: "q:*", Contentions: 3, Wait: 300 * ms, Acquisitions: 3},
		{Key: "q:1", Class: "q:*", Contentions: 5, Wait: 51 * ms, Acquisitions: 6},
		{Key: "q:4", Class: "q:*", Contentions: 2, Wait: 7 * ms, Acquisitions: 0},
	}
	if diff := cmp.Diff(wantWait, a.HotKeys(5*time.Minute, ByWait, 10)); diff != "" {
		t.Errorf("HotKeys(5m, wait) (-want +got):\n%s", diff)
	}
	if got := a.HotKeys(time.Minute, ByContentions, 2); len(got) != 2 || got[1].Key != "q:2" {
		t.Errorf("HotKeys(1m, contentions, 2) = %+v, want q:1, q:2", got)
	}

	// Counts from several buckets add up.
	clk.Set(aggT0.Add(25 * time.Second))
	a.Apply(evtest.Contend("q:2", 4, 10*ms, 25*time.Second))
	got := a.HotKeys(time.Minute, ByContentions, 1)
	if len(got) != 1 || got[0].Key != "q:2" || got[0].Contentions != 7 || got[0].Error != 0 {
		t.Errorf("HotKeys(1m) after a second bucket = %+v, want q:2 with 7 contentions, error 0", got)
	}
}

func TestHotKeysWindowExpiry(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(time.Second))
	a.Apply(evtest.Contend("w:1", 3, time.Millisecond, time.Second))
	count := func(w time.Duration) int64 {
		var n int64
		for _, h := range a.HotKeys(w, ByContentions, 10) {
			n += h.Contentions
		}
		return n
	}
	steps := []struct {
		at         time.Duration
		m1, m5, h1 int64
		why        string
	}{
		{59 * time.Second, 3, 3, 3, "all windows"},
		{71 * time.Second, 0, 3, 3, "past 1 m (+ one step)"},
		{5*time.Minute + 9*time.Second, 0, 3, 3, "inside 5 m + one step"},
		{5*time.Minute + 11*time.Second, 0, 0, 3, "past 5 m"},
		{59 * time.Minute, 0, 0, 3, "inside 1 h"},
		{time.Hour + 61*time.Second, 0, 0, 0, "past 1 h"},
	}
	for _, s := range steps {
		clk.Set(aggT0.Add(s.at))
		if m1, m5, h1 := count(time.Minute), count(5*time.Minute), count(time.Hour); m1 != s.m1 || m5 != s.m5 || h1 != s.h1 {
			t.Errorf("at %v (%s): contentions 1m, 5m, 1h = %d, %d, %d, want %d, %d, %d", s.at, s.why, m1, m5, h1, s.m1, s.m5, s.h1)
		}
	}
}

// TestHotKeysBounded streams far more distinct keys than a sketch holds and
// checks the space-saving guarantees for the heavy keys.
func TestHotKeysBounded(t *testing.T) {
	a, clk := newTestAggregator(t, Config{MaxKeys: 1000})
	var evs []event.Event
	for i := range 20000 {
		evs = append(evs, failed(fmt.Sprintf("noise:%d", i), "n", 0, time.Millisecond, 1, event.ReasonHeld))
		if i%40 == 0 {
			evs = append(evs, failed("heavy:1", "h", 0, time.Millisecond, 1, event.ReasonHeld))
		}
		if i%80 == 0 {
			evs = append(evs, failed("heavy:2", "h", 0, time.Millisecond, 1, event.ReasonHeld))
		}
	}
	// Spread over several buckets so merging is exercised too.
	for i := 0; i < len(evs); i += 1000 {
		clk.Add(3 * time.Second)
		a.Apply(evs[i:min(i+1000, len(evs))])
	}
	got := a.HotKeys(5*time.Minute, ByContentions, 3)
	if len(got) < 2 || got[0].Key != "heavy:1" || got[1].Key != "heavy:2" {
		t.Fatalf("HotKeys top = %+v, want heavy:1 then heavy:2", got)
	}
	for i, trueCount := range []int64{500, 250} {
		h := got[i]
		if h.Contentions < trueCount || h.Contentions-h.Error > trueCount {
			t.Errorf("%s: estimate %d, error %d: true count %d not in [estimate-error, estimate]", h.Key, h.Contentions, h.Error, trueCount)
		}
	}
	for _, s := range []*liveSketch{a.hot.liveCont, a.hot.liveWait} {
		indexed := 0
		for _, e := range s.idx {
			if e != 0 {
				indexed++
			}
		}
		if len(s.ents) > hotCapacity || indexed != len(s.ents) {
			t.Errorf("live sketch holds %d entries, %d indexed, want equal and at most %d", len(s.ents), indexed, hotCapacity)
		}
	}
}

// TestLiveSketchChurn streams many more keys than the sketch holds, with
// hashes that often collide (in part and in full), and checks after every
// add what space-saving guarantees: each tracked key's true weight lies in
// [count-err, count], the counts sum to the stream's total weight, every
// tracked key is found through the index and nothing else is indexed, and
// the heap is ordered and agrees with the entries.
func TestLiveSketchChurn(t *testing.T) {
	s := newLiveSketch()
	truth := map[string]int64{}
	var total int64
	rnd := uint64(1)
	next := func() uint64 { rnd ^= rnd << 13; rnd ^= rnd >> 7; rnd ^= rnd << 17; return rnd }
	for n := 0; n < 60_000; n++ {
		r := next()
		// Skewed keys: a few hundred hot ones, then a long tail.
		id := r % 5000
		if r%3 == 0 {
			id = r % 300
		}
		key := fmt.Sprintf("k:%d", id)
		// 4096 distinct hashes for 5000 keys: full collisions, and long
		// probe runs in the 2048-slot index.
		hash := uint32(id%4096) * 2654435761
		w := int64(next() % 4) // 0 adds only while there is room
		if n%7 == 0 {
			w = 0
		}
		s.add(key, hash, "c", w, 0, 0, 0)
		truth[key] += w
		total += w // a replacement adds w over the floor it takes over
		if n%997 != 0 && n < 59_000 {
			continue
		}
		var sum int64
		indexed := 0
		for _, e := range s.idx {
			if e != 0 {
				indexed++
			}
		}
		if indexed != len(s.ents) {
			t.Fatalf("after %d adds: %d index entries for %d sketch entries", n+1, indexed, len(s.ents))
		}
		for i, e := range s.ents {
			sum += e.count
			if got := s.find(e.key, s.hash[i]); got != int32(i) {
				t.Fatalf("after %d adds: find(%q) = %d, want %d", n+1, e.key, got, i)
			}
			if tr := truth[e.key]; tr > e.count || e.count-e.err > tr {
				t.Fatalf("after %d adds: %s true weight %d not in [%d, %d]", n+1, e.key, tr, e.count-e.err, e.count)
			}
			if s.heap[s.pos[i]].ent != int32(i) || s.heap[s.pos[i]].count != e.count {
				t.Fatalf("after %d adds: heap node of entry %d is %+v, entry count %d", n+1, i, s.heap[s.pos[i]], e.count)
			}
		}
		if sum != total {
			t.Fatalf("after %d adds: counts sum to %d, stream weight %d", n+1, sum, total)
		}
		for j := 1; j < len(s.heap); j++ {
			if s.heap[j].count < s.heap[(j-1)/2].count {
				t.Fatalf("after %d adds: heap out of order at %d", n+1, j)
			}
		}
	}
	if len(s.ents) != hotCapacity {
		t.Fatalf("sketch holds %d entries, want full (%d)", len(s.ents), hotCapacity)
	}
}

// Watched keys (passive acquisitions: their contention unknown) rank after
// the keys of known contention, by their acquisitions, marked unknown; a
// watched key whose contention is known (a Redisson waiter seen taking it)
// ranks with the others. The export (HotTop) ranks known figures only.
func TestHotKeysRankWatchedKeysByAcquisitions(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	ms := time.Millisecond
	clk.Set(aggT0.Add(time.Second))
	passive := func(key string, at time.Duration, attempts int, wait time.Duration) event.Event {
		e := acquired(key, "redsync 1234abcd", fmt.Sprintf("p:%s:%v", key, at), at, wait, attempts, 4*time.Second)
		e.Passive = true
		return e
	}
	var evs []event.Event
	evs = append(evs, evtest.Contend("q:1", 2, 10*ms, 0)...)
	for i := range 3 {
		evs = append(evs, passive("w:1", time.Duration(i)*ms, 1, 0))
	}
	evs = append(evs, passive("w:2", 0, 1, 0))
	evs = append(evs, passive("r:3", 0, 2, 30*ms)) // a Redisson waiter seen taking it
	a.Apply(evs)

	want := []HotKey{
		{Key: "q:1", Class: "q:*", Contentions: 2, Wait: 20 * ms, Acquisitions: 2},
		{Key: "r:3", Class: "r:*", Contentions: 1, Wait: 30 * ms, Acquisitions: 1},
		{Key: "w:1", Class: "w:*", Acquisitions: 3, ContentionUnknown: true},
		{Key: "w:2", Class: "w:*", Acquisitions: 1, ContentionUnknown: true},
	}
	if diff := cmp.Diff(want, a.HotKeys(time.Minute, ByContentions, 10)); diff != "" {
		t.Errorf("HotKeys(1m, contentions) (-want +got):\n%s", diff)
	}
	if got := a.HotKeys(time.Minute, ByContentions, 3); len(got) != 3 || got[2].Key != "w:1" {
		t.Errorf("HotKeys(1m, contentions, 3) = %+v, want q:1, r:3, w:1", got)
	}
	if top, _ := a.HotTop(time.Minute, ByContentions, 10); len(top) != 2 {
		t.Errorf("HotTop(1m, contentions) = %+v, want the two keys of known contention only", top)
	}
	// A later bucket's acquisitions add up, and an hour later they are gone.
	clk.Set(aggT0.Add(25 * time.Second))
	a.Apply([]event.Event{passive("w:2", 25*time.Second, 1, 0), passive("w:2", 25*time.Second+ms, 1, 0), passive("w:2", 25*time.Second+2*ms, 1, 0)})
	got := a.HotKeys(5*time.Minute, ByWait, 10)
	if len(got) != 4 || got[2].Key != "w:2" || got[2].Acquisitions != 4 || !got[2].ContentionUnknown {
		t.Errorf("HotKeys(5m, wait) after a second bucket = %+v, want w:2 third with 4 acquisitions, contention unknown", got)
	}
	clk.Set(aggT0.Add(2 * time.Hour))
	if got := a.HotKeys(time.Hour, ByContentions, 10); len(got) != 0 {
		t.Errorf("HotKeys(1h) two hours later = %+v, want none", got)
	}
}

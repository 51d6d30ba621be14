package state

import (
	"fmt"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/event"
)

// classByName returns the figures of class from ClassStats(window).
func classByName(t *testing.T, a *Aggregator, window time.Duration, class string) ClassStats {
	t.Helper()
	for _, c := range a.ClassStats(window) {
		if c.Class == class {
			return c
		}
	}
	t.Fatalf("ClassStats(%v) has no class %q", window, class)
	return ClassStats{}
}

// TestClassStatsCountKnownWork applies a workload whose figures are known
// and checks every figure of its class to the count, and that a watched
// class's waits are unknown rather than zero.
func TestClassStatsCountKnownWork(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	var evs []event.Event
	at := time.Second
	// 10 acquisitions at once (1 ms of round trip), held 100 ms.
	for i := range 10 {
		key, lease := fmt.Sprintf("order:%d", i), fmt.Sprintf("a%d", i)
		evs = append(evs, acquired(key, "api", lease, at, time.Millisecond, 1, 5*time.Second),
			ended(event.Released, key, "api", lease, at+100*time.Millisecond, 100*time.Millisecond, ""))
	}
	// 4 acquisitions of order:1 that waited 200 ms over 3 attempts, held 300 ms.
	for i := range 4 {
		lease := fmt.Sprintf("c%d", i)
		start := at + time.Second + time.Duration(i)*400*time.Millisecond
		evs = append(evs, acquired("order:1", "worker", lease, start, 200*time.Millisecond, 3, 5*time.Second),
			ended(event.Released, "order:1", "worker", lease, start+300*time.Millisecond, 300*time.Millisecond, ""))
	}
	// 3 timeouts after 500 ms, 2 refused tries, 1 error (wait 10 ms).
	for range 3 {
		evs = append(evs, failed("order:1", "batch", at+2*time.Second, 500*time.Millisecond, 5, event.ReasonTimeout))
	}
	for range 2 {
		evs = append(evs, failed("order:1", "batch", at+2*time.Second, 0, 1, event.ReasonHeld))
	}
	evs = append(evs, failed("order:2", "batch", at+2*time.Second, 10*time.Millisecond, 1, event.ReasonError))
	// One hold with a TTL of 1 s that is never released: it expires.
	evs = append(evs, acquired("order:9", "cron", "x", at+3*time.Second, time.Millisecond, 1, time.Second))
	// A watched class: three locks of another library, without a TTL.
	for i := range 3 {
		e := acquired(fmt.Sprintf("legacy:%d", i), "redis-py", fmt.Sprintf("p%d", i), at+3*time.Second, 0, 1, 0)
		e.Passive = true
		evs = append(evs, e)
	}
	clk.Set(aggT0.Add(at + 3*time.Second))
	a.Apply(evs)
	clk.Set(aggT0.Add(at + 6*time.Second)) // past the 1 s TTL and its grace
	a.Tick()

	got := classByName(t, a, 5*time.Minute, "order:*")
	wantWaitSum := 10*time.Millisecond + 4*200*time.Millisecond + 3*500*time.Millisecond + 10*time.Millisecond + time.Millisecond
	want := ClassStats{
		Class: "order:*", Window: 5 * time.Minute, Span: 3 * time.Second, // from its first event, at T0+4s
		Acquisitions: 15, WaitsKnown: true, Contentions: 4 + 2,
		Failures: [4]int64{3, 0, 1, 2},
		// 15 acquisitions and 6 failed obtains waited.
		Wait: Summary{Count: 21, Avg: wantWaitSum / 21, Max: 500 * time.Millisecond},
		// 14 holds released, 1 expired after its 1 s.
		Hold:        Summary{Count: 15, Avg: (10*100*time.Millisecond + 4*300*time.Millisecond + time.Second) / 15, Max: time.Second},
		TTLs:        []TTLCount{{5 * time.Second, 14}, {time.Second, 1}},
		Expirations: 1,
		HotKey:      "order:1", HotKeyContentions: 6,
		Busiest: BusyKey{Key: "order:1", Hold: 100*time.Millisecond + 4*300*time.Millisecond, Wait: time.Millisecond + 4*200*time.Millisecond + 3*500*time.Millisecond,
			Acquisitions: 5, Contentions: 6},
		GiveUpWait: 3 * 500 * time.Millisecond,
		Bare:       15, BareNear: 1, // the expired hold ran its whole TTL
		BareHold: Summary{Count: 15, Avg: (10*100*time.Millisecond + 4*300*time.Millisecond + time.Second) / 15, Max: time.Second},
	}
	// The quantiles are estimates: checked for where they must lie.
	if got.Wait.P50 <= 0 || got.Wait.P50 > got.Wait.Max || got.Wait.P99 < 200*time.Millisecond || got.Wait.P99 > got.Wait.Max {
		t.Errorf("wait p50 %v, p99 %v: want within (0, %v], the p99 at least 200ms", got.Wait.P50, got.Wait.P99, got.Wait.Max)
	}
	if got.Hold.P50 < 50*time.Millisecond || got.Hold.P50 > 100*time.Millisecond || got.Hold.P99 < 500*time.Millisecond || got.Hold.P99 > time.Second {
		t.Errorf("hold p50 %v, p99 %v: want p50 in [50ms, 100ms] (10 of 15 holds are 100ms), p99 in [500ms, 1s]", got.Hold.P50, got.Hold.P99)
	}
	for _, s := range []*Summary{&got.Wait, &got.Hold, &got.BareHold} {
		s.P50, s.P99 = 0, 0
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ClassStats(5m) of order:* (-want +got):\n%s", d)
	}
	if r, ok := got.SuccessRatio(); !ok || r != 15.0/21 {
		t.Errorf("SuccessRatio() = %v, %v; want 15/21, true", r, ok)
	}

	legacy := classByName(t, a, 5*time.Minute, "legacy:*")
	if legacy.WaitsKnown || legacy.Acquisitions != 3 || legacy.Passive != 3 || legacy.NoTTL != 3 || legacy.Held != 3 || legacy.NoExpiry != 3 ||
		legacy.Wait.Count != 0 || legacy.HotKey == "" {
		t.Errorf("legacy:* = %+v; want waits unknown, 3 passive acquisitions without TTL, 3 held without expiry, no wait observed, a hot key", legacy)
	}

	// Two minutes on, the 1 m window has none of it and the 5 m and 1 h ones all.
	clk.Add(2 * time.Minute)
	// Now is T0+2m7s: the 1 m window is the live step (from 2m0s) and the six
	// before it, from T0+1m.
	if c := classByName(t, a, time.Minute, "order:*"); c.Acquisitions != 0 || c.Hold.Count != 0 || c.Span != 67*time.Second {
		t.Errorf("ClassStats(1m) two minutes later = %d acquisitions, %d holds, span %v; want none, span 1m7s", c.Acquisitions, c.Hold.Count, c.Span)
	}
	for _, w := range []time.Duration{5 * time.Minute, time.Hour} {
		if c := classByName(t, a, w, "order:*"); c.Acquisitions != 15 || c.Hold.Count != 15 || c.Expirations != 1 {
			t.Errorf("ClassStats(%v) = %d acquisitions, %d holds, %d expirations; want 15, 15, 1", w, c.Acquisitions, c.Hold.Count, c.Expirations)
		}
	}
}

// TestClassStatsCountRenewalsAndTTLs checks the figures only the advice
// reads: renewed holds are not bare, headroom shares, long-TTL holds, TTLs
// a few ms apart counted as one.
func TestClassStatsCountRenewalsAndTTLs(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	var evs []event.Event
	// A hold renewed twice (headroom 2 s, then 0.3 s of 3 s), then released.
	evs = append(evs, acquired("job:1", "w", "r", time.Second, 0, 1, 3*time.Second))
	r1 := renewed("job:1", "w", "r", 2*time.Second, 3*time.Second)
	r1.Headroom = 2 * time.Second
	r2 := renewed("job:1", "w", "r", 4700*time.Millisecond, 3*time.Second)
	r2.Headroom = 300 * time.Millisecond
	evs = append(evs, r1, r2, ended(event.Released, "job:1", "w", "r", 5*time.Second, 4*time.Second, ""))
	// Two bare holds under 2 min TTLs (watched: 120 000 and 119 995 ms), one
	// of 1 s (under a tenth) and one of 13 s (over it).
	for i, hold := range []time.Duration{time.Second, 13 * time.Second} {
		key, lease := fmt.Sprintf("job:%d", i+2), fmt.Sprintf("b%d", i)
		e := acquired(key, "py", lease, time.Second, 0, 1, 2*time.Minute-time.Duration(i)*5*time.Millisecond)
		e.Passive = true
		evs = append(evs, e, ended(event.Released, key, "py", lease, time.Second+hold, hold, ""))
	}
	clk.Set(aggT0.Add(14 * time.Second))
	a.Apply(evs)

	got := classByName(t, a, 5*time.Minute, "job:*")
	if got.Bare != 2 || got.BareNear != 0 || got.LongTTLBare != 2 || got.LongTTLOver != 1 {
		t.Errorf("bare %d, near %d, long-TTL %d, over a tenth %d; want 2 (the renewed hold is not bare), 0, 2, 1",
			got.Bare, got.BareNear, got.LongTTLBare, got.LongTTLOver)
	}
	if got.Renewals != 2 || got.RenewLate != 1 || got.RenewAtRisk != 1 || got.MinHeadroom != 300*time.Millisecond || got.MinHeadroomOf != 3*time.Second {
		t.Errorf("renewals %d, late %d, at risk %d, least headroom %v of %v; want 2, 1, 1, 300ms of 3s",
			got.Renewals, got.RenewLate, got.RenewAtRisk, got.MinHeadroom, got.MinHeadroomOf)
	}
	wantTTLs := []TTLCount{{2 * time.Minute, 2}, {3 * time.Second, 1}}
	if d := cmp.Diff(wantTTLs, got.TTLs); d != "" {
		t.Errorf("TTLs (-want +got):\n%s", d)
	}
}

// TestClassStatsOfAReplayedStream: a restarted collector rebuilds the
// windows from the replayed events, muted, as it rebuilds the hot keys.
func TestClassStatsOfAReplayedStream(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(time.Minute))
	a.BeginReplay(aggT0)
	var evs []event.Event
	for i := range 5 {
		lease := fmt.Sprintf("l%d", i)
		at := time.Duration(i) * time.Second
		evs = append(evs, acquired("cart:1", "web", lease, at, 0, 1, 10*time.Second),
			ended(event.Released, "cart:1", "web", lease, at+500*time.Millisecond, 500*time.Millisecond, ""))
	}
	a.Replay(evs, false)
	a.EndReplay(aggT0.Add(time.Minute))
	got := classByName(t, a, 5*time.Minute, "cart:*")
	if got.Acquisitions != 5 || got.Hold.Count != 5 || got.Hold.Max != 500*time.Millisecond || got.Span != time.Minute {
		t.Errorf("after replay: %d acquisitions, %d holds, max %v, span %v; want 5, 5, 500ms, 1m", got.Acquisitions, got.Hold.Count, got.Hold.Max, got.Span)
	}
	if n := tallyOf(a).get("acquisitions", "cart:*"); n != 0 {
		t.Errorf("muted replay counted %v acquisitions in the metrics, want 0", n)
	}
}

// TestClassWindowMemory holds a class's window to the size the Memory
// comment states, whatever it counts: no bucket holds a string or grows.
func TestClassWindowMemory(t *testing.T) {
	if n := unsafe.Sizeof(classWindow{}); n > 56<<10 {
		t.Errorf("a class window is %d bytes, want at most 56 KiB (aggregator.go, class_window.go)", n)
	}
	a, clk := newTestAggregator(t, Config{})
	var evs []event.Event
	for i := range 1000 {
		e := acquired("t:1", "o", fmt.Sprint(i), time.Second, 0, 1, time.Duration(i+1)*time.Second)
		evs = append(evs, e)
	}
	clk.Set(aggT0.Add(2 * time.Second))
	a.Apply(evs)
	got := classByName(t, a, time.Hour, "t:*")
	var n int64
	for _, x := range got.TTLs {
		n += x.Count
	}
	if len(got.TTLs) > ttlSlots || n+got.TTLOther != 1000 {
		t.Errorf("1000 distinct TTLs: %d kept, %d + %d other counted; want at most %d kept, all 1000 counted", len(got.TTLs), n, got.TTLOther, ttlSlots)
	}
}

// TestClassWindowFoldsMinutes: a minute's ten-second buckets are folded
// into its minute bucket when the next minute begins, and a figure that
// comes late for a folded minute still counts in the hour.
func TestClassWindowFoldsMinutes(t *testing.T) {
	const m0 = 1000 // a minute far from zero
	w := newClassWindow(0)
	for st := int64(m0 * hotMinuteLen); st < (m0+3)*hotMinuteLen; st++ { // 18 steps over three minutes
		w.acquired(st, false, time.Second)
		w.held(st, time.Duration(st-m0*hotMinuteLen+1)*time.Millisecond)
	}
	w.acquired(m0*hotMinuteLen+1, false, 2*time.Second) // late: minute m0 is folded already
	cur := int64((m0+3)*hotMinuteLen - 1)
	h, _ := w.sum(time.Hour, cur)
	five, _ := w.sum(5*time.Minute, cur)
	one, _ := w.sum(time.Minute, cur)
	if h.acq != 19 || five.acq != 19 || one.acq != 7 {
		t.Errorf("acquisitions: 1h %d, 5m %d, 1m %d; want 19, 19 and 7 (the live step and the six before it)", h.acq, five.acq, one.acq)
	}
	if hs := h.hold.summary(); hs.Count != 18 || hs.Max != 18*time.Millisecond || hs.Avg != 9500*time.Microsecond {
		t.Errorf("1h hold = %+v; want 18 holds of 1..18 ms", hs)
	}
	if want := []TTLCount{{time.Second, 18}, {2 * time.Second, 1}}; !slices.Equal(h.ttls, want) {
		t.Errorf("1h TTLs = %v, want %v", h.ttls, want)
	}
	// Much later the folded minutes are all the hour has, until they age out.
	later := cur + 30*hotMinuteLen
	if h, _ := w.sum(time.Hour, later); h.acq != 19 {
		t.Errorf("30 minutes later: 1h has %d acquisitions, want 19", h.acq)
	}
	if h, _ := w.sum(time.Hour, cur+62*hotMinuteLen); h.acq != 0 {
		t.Errorf("62 minutes later: 1h has %d acquisitions, want 0", h.acq)
	}
}

// TestClassStatsWhileApplying reads the class view while events are
// applied (go test -race checks the locking): every read is whole.
func TestClassStatsWhileApplying(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			key, lease := fmt.Sprintf("c%d:job:%d", i%7, i), fmt.Sprint(i)
			at := time.Duration(i) * 10 * time.Millisecond
			a.Apply([]event.Event{acquired(key, "w", lease, at, time.Millisecond, 2, time.Second),
				ended(event.Released, key, "w", lease, at, 5*time.Millisecond, "")})
			if i%100 == 0 {
				clk.Add(10 * time.Second)
				a.Tick()
			}
		}
	}()
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
		}
		for _, c := range a.ClassStats(time.Hour) {
			if c.Hold.Count > c.Acquisitions {
				t.Fatalf("%s: %d holds ended of %d acquisitions", c.Class, c.Hold.Count, c.Acquisitions)
			}
			if _, ok := a.ClassDetail(time.Minute, c.Class); !ok {
				t.Fatalf("ClassDetail(%q) unknown", c.Class)
			}
		}
	}
	var n int64
	for _, c := range a.ClassStats(time.Hour) {
		n += c.Acquisitions
	}
	if n != 2000 {
		t.Errorf("acquisitions over the hour = %d, want 2000", n)
	}
}

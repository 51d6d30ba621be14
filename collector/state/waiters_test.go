package state

import (
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// A waiter whose process died never sends its end: it is dropped once its
// deadline has passed.
func TestDeadWaiterDropped(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	w := ev(event.Waiting, "k", "ghost", "G1", 0)
	w.Wait = 2 * time.Second
	agg.Apply([]event.Event{w})
	if n := agg.Overview().Waiters; n != 1 {
		t.Fatalf("waiters = %d, want 1", n)
	}
	clk.Set(aggT0.Add(2500 * time.Millisecond))
	agg.Tick()
	if n := agg.Overview().Waiters; n != 1 {
		t.Fatalf("waiters %v after the waiter's deadline (within the grace) = %d, want 1", 2500*time.Millisecond, n)
	}
	clk.Set(aggT0.Add(3500 * time.Millisecond))
	agg.Tick()
	if n := agg.Overview().Waiters; n != 0 {
		t.Errorf("waiters past the deadline and its grace = %d, want 0: a dead waiter is a ghost", n)
	}
}

// LiveWaiters, which the operator command line computes from the stream,
// counts at every moment the waiters the Aggregator shows: ended by the
// same lease's acquisition or failure, dropped a grace past their own
// deadline or the default bound, lease-less waits ignored, whatever order
// two partitions' events come in.
func TestLiveWaitersAgreesWithTheAggregator(t *testing.T) {
	waiting := func(key, lease string, at, wait time.Duration) event.Event {
		e := ev(event.Waiting, key, "o-"+lease, lease, at)
		e.Wait = wait
		return e
	}
	s := time.Second
	evs := []event.Event{
		acquired("a", "H", "LH", 0, 0, 1, time.Hour),
		waiting("a", "W1", s, 0),             // no deadline: the default bound
		waiting("a", "W2", s, 3*s),           // gives up at 4 s, its end never comes
		waiting("a", "W3", 2*s, time.Minute), // acquires at 20 s
		waiting("b", "W4", 2*s, time.Minute), // fails at 30 s
		waiting("b", "", 2*s, time.Minute),   // no lease: not tracked
		acquired("a", "o-W3", "W3", 20*s, 18*s, 9, time.Minute),
		failed("b", "o-W4", 30*s, 28*s, 14, event.ReasonTimeout),
	}
	evs[7].Lease = "W4"
	byKey := func(a *Aggregator) map[string]int {
		out := map[string]int{}
		for _, k := range []string{"a", "b"} {
			if n := mustLock(t, a, k).Waiters; n > 0 {
				out[k] = n
			}
		}
		return out
	}
	for _, tc := range []struct {
		at   time.Duration
		want map[string]int
	}{
		{3 * s, map[string]int{"a": 3, "b": 1}},
		{4500 * time.Millisecond, map[string]int{"a": 3, "b": 1}}, // W2 past its deadline, within the grace
		{5500 * time.Millisecond, map[string]int{"a": 2, "b": 1}}, // W2 dropped
		{25 * s, map[string]int{"a": 1, "b": 1}},                  // W3 acquired
		{35 * s, map[string]int{"a": 1}},                          // W4 failed
		{s + defaultWaitBound + 500*time.Millisecond, map[string]int{"a": 1}},
		{s + defaultWaitBound + 1500*time.Millisecond, map[string]int{}}, // W1 past the bound and the grace
	} {
		agg, clk := newTestAggregator(t, Config{})
		var applied []event.Event
		for _, e := range evs {
			if e.TS <= aggT0.Add(tc.at).UnixNano() {
				clk.Set(time.Unix(0, e.TS)) // live: each event applied as it happens
				agg.Apply([]event.Event{e})
				applied = append(applied, e)
			}
		}
		clk.Set(aggT0.Add(tc.at))
		agg.Tick()
		if got := byKey(agg); !maps.Equal(got, tc.want) {
			t.Errorf("at %v: the Aggregator shows %v waiting, want %v", tc.at, got, tc.want)
		}
		// Two partitions: their events interleave in any order.
		mixed := append(slices.Clone(applied[len(applied)/2:]), applied[:len(applied)/2]...)
		if got := LiveWaiters(mixed, aggT0.Add(tc.at)); !maps.Equal(got, tc.want) {
			t.Errorf("at %v: LiveWaiters = %v, want %v as the Aggregator shows", tc.at, got, tc.want)
		}
	}
}

// Deadlocks, which pages call on every request, finds exactly the cycles of
// Blocking: a three-call cycle, a chain into it and plain waiters do not
// change what it reports, and without waiting holders it reports none.
func TestDeadlocksMatchBlockingCycles(t *testing.T) {
	agg, _ := newTestAggregator(t, Config{})
	waiting := func(key, owner, lease string, at time.Duration, holds ...string) event.Event {
		e := ev(event.Waiting, key, owner, lease, at)
		e.Wait, e.Reason = time.Minute, event.JoinLeases(holds)
		return e
	}
	agg.Apply([]event.Event{
		acquired("a", "A", "LA", 0, 0, 1, time.Minute),
		acquired("b", "B", "LB", 0, 0, 1, time.Minute),
		acquired("c", "C", "LC", 0, 0, 1, time.Minute),
		acquired("d", "D", "LD", 0, 0, 1, time.Minute),
		waiting("x", "E", "WE", time.Second), // waits for a free key, holds nothing
		waiting("a", "F", "WF", time.Second), // plain contention on a
	})
	if d, b := agg.Deadlocks(), agg.Blocking().Cycles; d != nil || b != nil {
		t.Fatalf("without a cycle: Deadlocks = %+v, Blocking().Cycles = %+v; want none", d, b)
	}
	agg.Apply([]event.Event{
		waiting("b", "A", "WA", 2*time.Second, "LA"),
		waiting("c", "B", "WB", 2*time.Second, "LB"),
		waiting("a", "D", "WD", 2*time.Second, "LD"), // a chain into the cycle
		waiting("a", "C", "WC", 3*time.Second, "LC"), // closes a -> b -> c -> a
	})
	d, b := agg.Deadlocks(), agg.Blocking().Cycles
	if len(d) != 1 || len(d[0].Members) != 3 {
		t.Fatalf("Deadlocks = %+v, want one cycle of three", d)
	}
	if !reflect.DeepEqual(d, b) {
		t.Errorf("Deadlocks = %+v, want Blocking().Cycles = %+v", d, b)
	}
}

// A restarted collector replays the waits of a deadlock that still lasts.
// Its previous incarnation counted that deadlock in
// lockscope_deadlocks_detected_total; the new one, whose counter starts at
// zero, shows the deadlock without counting it again. A deadlock that formed
// within a scan of the previous incarnation's stop (it may not have seen it),
// after it (in the counted part of the replay), or live is counted once.
func TestReplayedDeadlockNotCountedAgain(t *testing.T) {
	waiting := func(key, owner, lease string, at time.Duration, holds ...string) event.Event {
		e := ev(event.Waiting, key, owner, lease, at)
		e.Wait, e.Reason = time.Minute, event.JoinLeases(holds)
		return e
	}
	// deadlock: A holds a and waits for b, B holds b and waits for a, the
	// last wait beginning at formed.
	deadlock := func(a, b string, formed time.Duration) []event.Event {
		return []event.Event{
			acquired(a, "A", "L"+a, 0, 0, 1, 10*time.Minute),
			acquired(b, "B", "L"+b, 0, 0, 1, 10*time.Minute),
			waiting(b, "A", "W"+a, formed-time.Second, "L"+a),
			waiting(a, "B", "W"+b, formed, "L"+b),
		}
	}
	for _, tc := range []struct {
		name          string
		countedBefore time.Duration // 0: a first start, nothing counted before
		want          float64
	}{
		{"formed well before the stop", 10 * time.Second, 0},
		{"formed in the last scan before the stop", 5500 * time.Millisecond, 1},
		{"formed after the stop", 3 * time.Second, 1},
		{"first start", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agg, clk := newTestAggregator(t, Config{})
			clk.Set(aggT0.Add(20 * time.Second))
			evs := deadlock("x", "y", 5*time.Second)
			var countedBefore time.Time
			if tc.countedBefore > 0 {
				countedBefore = aggT0.Add(tc.countedBefore)
			}
			agg.BeginReplay(aggT0)
			agg.Replay(evs, tc.countedBefore < 5*time.Second) // counted before: muted
			agg.EndReplay(countedBefore)
			agg.Tick()
			if n := float64(agg.DeadlockCycles()); n != 1 {
				t.Fatalf("lockscope_deadlock_cycles = %v after the replay, want 1", n)
			}
			if n := tallyOf(agg).get("deadlocks", ""); n != tc.want {
				t.Errorf("lockscope_deadlocks_detected_total = %v after the replay, want %v", n, tc.want)
			}
			// The replayed deadlock lasts: later scans count it no more.
			clk.Add(2 * scanEvery)
			agg.Tick()
			if n := tallyOf(agg).get("deadlocks", ""); n != tc.want {
				t.Errorf("lockscope_deadlocks_detected_total = %v a scan later, want %v", n, tc.want)
			}
			// A new deadlock, live, is counted.
			agg.Apply(deadlock("p", "q", 21*time.Second))
			clk.Add(2 * scanEvery)
			agg.Tick()
			if n := float64(agg.DeadlockCycles()); n != 2 {
				t.Errorf("lockscope_deadlock_cycles = %v with a live deadlock added, want 2", n)
			}
			if n := tallyOf(agg).get("deadlocks", ""); n != tc.want+1 {
				t.Errorf("lockscope_deadlocks_detected_total = %v with a live deadlock added, want %v", n, tc.want+1)
			}
		})
	}
}

// 100 000 callers wait for one key. A third of them give up (their failed
// events end their waits), the rest die; those whose deadline passed are
// dropped at the next Tick, and the others stay, each key's queue in order
// of arrival. The key page lists the oldest maxWaitersNow of them and
// counts them all.
func TestWaitersManyOnOneKey(t *testing.T) {
	const n = 100_000
	agg, clk := newTestAggregator(t, Config{})
	evs := waitingCrowd("hot", n, 0)
	for i := range evs {
		evs[i].Wait = time.Second + time.Duration(i)*time.Millisecond // deadlines 1 s to 101 s after their start
	}
	clk.Set(aggT0.Add(2 * time.Second)) // the event clock, when the ends come
	agg.Apply(evs)
	var ends []event.Event
	for i := 0; i < n; i += 3 {
		e := failed("hot", evs[i].Owner, 2*time.Second, time.Second, 2, event.ReasonTimeout)
		e.Lease = evs[i].Lease
		ends = append(ends, e)
	}
	agg.Apply(ends)
	left := n - len(ends)
	if w := agg.Overview().Waiters; w != left {
		t.Fatalf("waiters after %d gave up = %d, want %d", len(ends), w, left)
	}
	// At 51 s plus the grace, the waiters whose deadline (start + 1 s +
	// i ms) passed 51 s are gone: i < 50 000, but for those that gave up.
	clk.Set(aggT0.Add(51*time.Second + DefaultExpiryGrace))
	agg.Tick()
	var want []string
	for i := 0; i < n; i++ {
		start := time.Duration(i) * time.Microsecond
		if i%3 != 0 && start+evs[i].Wait >= 51*time.Second {
			want = append(want, evs[i].Lease)
		}
	}
	d, ok := agg.Lock("hot")
	if !ok {
		t.Fatal(`Lock("hot") unknown`)
	}
	if d.Waiters != len(want) || agg.Overview().Waiters != len(want) {
		t.Fatalf("waiters after the deadlines passed = %d (key) and %d (overview), want %d", d.Waiters, agg.Overview().Waiters, len(want))
	}
	if len(d.WaitersNow) != maxWaitersNow {
		t.Fatalf("KeyDetail.WaitersNow lists %d waiters, want the oldest %d", len(d.WaitersNow), maxWaitersNow)
	}
	for i, x := range d.WaitersNow {
		if x.Lease != want[i] {
			t.Fatalf("WaitersNow[%d] = %s, want %s (oldest first)", i, x.Lease, want[i])
		}
	}
	clk.Set(aggT0.Add(2 * time.Minute))
	agg.Tick()
	if w := agg.Overview().Waiters; w != 0 {
		t.Errorf("waiters after every deadline passed = %d, want 0", w)
	}
	if _, ok := agg.Lock("hot"); !ok {
		t.Fatal(`Lock("hot") unknown`)
	}
}

// The waiters' structures agree with a plain list of waiters through a
// random sequence of waits beginning, ending and expiring over a few keys.
func TestWaitsAgainstModel(t *testing.T) {
	type mw struct {
		key, lease string
		deadline   int64
	}
	var w waits
	w.init()
	var model []mw
	rnd := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c"}
	clock := int64(0)
	for step := range 20_000 {
		switch op := rnd.IntN(10); {
		case op < 5:
			lease := "L" + strconv.Itoa(step)
			key := keys[rnd.IntN(len(keys))]
			e := event.Event{Type: event.Waiting, Key: key, Owner: "o", Lease: lease, Wait: time.Duration(1 + rnd.IntN(1000))}
			w.add(&e, "c", clock)
			model = append(model, mw{key, lease, clock + int64(e.Wait)})
		case op < 8 && len(model) > 0:
			i := rnd.IntN(len(model))
			w.end(model[i].lease, clock, EndedFailed)
			model = slices.Delete(model, i, i+1)
		default:
			clock += int64(rnd.IntN(300))
			w.expire(clock)
			model = slices.DeleteFunc(model, func(x mw) bool { return x.deadline < clock })
		}
		if w.total() != len(model) {
			t.Fatalf("step %d: total = %d, want %d", step, w.total(), len(model))
		}
		sum := 0
		for _, x := range w.byLease {
			sum += x.cost()
		}
		if w.bytes != sum {
			t.Fatalf("step %d: waiters count %d bytes, cost %d", step, w.bytes, sum)
		}
		if step%97 != 0 {
			continue
		}
		for _, k := range keys {
			var want []string
			for _, x := range model {
				if x.key == k {
					want = append(want, x.lease)
				}
			}
			var got []string
			for _, x := range w.keyWaiters(k, len(model)+1) {
				got = append(got, x.lease)
			}
			if !slices.Equal(got, want) || w.count(k) != len(want) {
				t.Fatalf("step %d: key %s waiters = %v (count %d), want %v", step, k, got, w.count(k), want)
			}
		}
	}
}

// A waiter is shown with the deadline its caller gave, and with none when
// it gave none (a Redisson channel subscriber, a context without a
// deadline): the bound that drops it is the state's, not the caller's.
func TestWaiterDeadlineIsTheCallers(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(2 * time.Second))
	timed := ev(event.Waiting, "a", "w1", "W1", time.Second)
	timed.Wait = 30 * time.Second
	agg.Apply([]event.Event{acquired("a", "H", "LH", 0, 0, 1, time.Hour), timed, ev(event.Waiting, "a", "w2", "W2", time.Second)})
	d, _ := agg.Lock("a")
	if len(d.WaitersNow) != 2 {
		t.Fatalf("waiters = %+v, want 2", d.WaitersNow)
	}
	if got, want := d.WaitersNow[0].Deadline, aggT0.Add(31*time.Second); !got.Equal(want) {
		t.Errorf("deadline of a waiter that gave 30 s = %v, want %v", got, want)
	}
	if got := d.WaitersNow[1].Deadline; !got.IsZero() {
		t.Errorf("deadline of a waiter that gave none = %v, want zero (not known)", got)
	}
}

// A waiter without a deadline said to wait again (the same lease) is kept
// 5 minutes from then, its since unchanged; one said no more is dropped;
// the repeat of a waiter with a deadline changes nothing. LiveWaiters,
// from the same events, agrees.
func TestWaiterSaidAgainIsKept(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	at := func(d time.Duration) time.Time { return aggT0.Add(d) }
	timed := func(d time.Duration) event.Event {
		e := ev(event.Waiting, "a", "w2", "W2", d)
		e.Wait = 6 * time.Minute
		return e
	}
	evs := []event.Event{acquired("a", "H", "LH", 0, 0, 1, time.Hour),
		ev(event.Waiting, "a", "w1", "W1", time.Second), timed(time.Second),
		ev(event.Waiting, "a", "w1", "W1", 4*time.Minute), timed(4 * time.Minute)}
	for _, e := range evs {
		clk.Set(time.Unix(0, e.TS))
		agg.Apply([]event.Event{e})
	}
	clk.Set(at(8 * time.Minute))
	agg.Tick()
	d, _ := agg.Lock("a")
	if len(d.WaitersNow) != 1 || d.WaitersNow[0].Lease != "W1" || !d.WaitersNow[0].Since.Equal(at(time.Second)) {
		t.Fatalf("at 8 min: waiters %+v; want W1 only (said again at 4 min), waiting since 1 s (W2's own deadline, 6 min after 1 s, passed)", d.WaitersNow)
	}
	if n := LiveWaiters(slices.Clone(evs), at(8*time.Minute))["a"]; n != 1 {
		t.Errorf("LiveWaiters at 8 min = %d, want 1", n)
	}
	clk.Set(at(10 * time.Minute))
	agg.Tick()
	if d, _ := agg.Lock("a"); len(d.WaitersNow) != 0 {
		t.Errorf("at 10 min: waiters %+v; want none: W1 was last said to wait at 4 min", d.WaitersNow)
	}
}

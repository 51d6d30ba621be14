package state

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lockscope/lockscope/event"
)

// checkCosts fails unless every shard's count of its keys' cost is what
// their costs add up to.
func checkCosts(t testing.TB, a *Aggregator) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.keys.shards {
		sh := &a.keys.shards[i]
		sh.mu.Lock()
		sum := 0
		sh.each(func(k *keyState) { sum += k.cost() })
		got := sh.bytes
		sh.mu.Unlock()
		if got != sum {
			t.Fatalf("shard %d counts %d bytes, its keys cost %d", i, got, sum)
		}
	}
}

// Strings longer than the state keeps are cut where they enter (at a UTF-8
// boundary), each cut counted by field; a key too long to track is not cut
// but skipped, and counted.
func TestLongFieldsCut(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(time.Minute))
	long := func(n int) string { return strings.Repeat("é", n/2) } // 2-byte runes
	e := acquired("k", long(1000), long(300), 0, 0, 1, time.Minute)
	f := ended(event.Forced, "k", long(1000), long(300), time.Second, 0, long(600))
	f.By = long(400)
	w := ev(event.Waiting, "w", "o", "WL", time.Second)
	w.Holder, w.Wait = long(300)+"x", time.Minute
	tooLong := acquired(strings.Repeat("k", MaxKeyBytes+1), "o", "L2", 0, 0, 1, time.Minute)
	longest := acquired(strings.Repeat("k", MaxKeyBytes), "o", "L3", 0, 0, 1, time.Minute)
	in := []event.Event{e, f, w, tooLong, longest}
	agg.Apply(in)
	if in[0].Owner != long(1000) {
		t.Errorf("Apply changed its caller's events")
	}

	d, ok := agg.Lock("k")
	if !ok {
		t.Fatal(`Lock("k") unknown`)
	}
	for _, r := range d.Recent {
		fields := map[string]string{"owner": r.Owner, "lease": r.Lease}
		if r.Type == event.Forced {
			fields["by"] = r.By
		}
		for name, s := range fields {
			if len(s) > MaxTextBytes || !utf8.ValidString(s) || len(s) < MaxTextBytes-1 {
				t.Errorf("%s event: %s of %d bytes (valid UTF-8: %v), want cut to %d at a rune boundary", r.Type, name, len(s), utf8.ValidString(s), MaxTextBytes)
			}
		}
		if r.Type == event.Forced && len(r.Reason) != MaxReasonBytes {
			t.Errorf("forced event: reason of %d bytes, want %d", len(r.Reason), MaxReasonBytes)
		}
	}
	wd, _ := agg.Lock("w")
	if len(wd.WaitersNow) != 1 || len(wd.WaitersNow[0].Holder) != MaxTextBytes {
		t.Errorf("waiter = %+v, want one, its holder cut to %d bytes", wd.WaitersNow, MaxTextBytes)
	}
	if _, ok := agg.Lock(tooLong.Key); ok {
		t.Errorf("a key of %d bytes is tracked, want its events skipped", len(tooLong.Key))
	}
	if _, ok := agg.Lock(longest.Key); !ok {
		t.Errorf("a key of %d bytes is not tracked", len(longest.Key))
	}
	tl := tallyOf(agg)
	for field, want := range map[string]float64{"key": 1, "owner": 2, "lease": 2, "reason": 1, "holder": 1, "by": 1} {
		if got := tl.get("cut_"+field, ""); got != want {
			t.Errorf("cut %s = %v, want %v", field, got, want)
		}
	}
	if got := agg.Overview().EventsTotal; got != 4 {
		t.Errorf("events applied = %d, want 4: the one with a key too long is skipped", got)
	}
}

// fillIntern fills the intern table, so that records keep their strings
// inline as a stream of distinct strings makes them.
func fillIntern(agg *Aggregator) {
	for i := range maxInterned {
		agg.Apply([]event.Event{failed("fill", fmt.Sprint("owner-", i), 0, 0, 1, event.ReasonHeld)})
	}
}

// Records with long strings leave fewer events in a key's ring, never a
// buffer past maxRingBytes; the key's figures still count every event.
func TestRingBoundedInBytes(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(time.Hour))
	fillIntern(agg)
	var applied []event.Event
	for i := range 64 {
		owner := fmt.Sprintf("%03d", i) + strings.Repeat("o", MaxTextBytes-3)
		lease := fmt.Sprintf("%03d", i) + strings.Repeat("l", MaxTextBytes-3)
		e := acquired("k", owner, lease, time.Duration(2*i)*time.Millisecond, time.Millisecond, 1, time.Minute)
		r := ended(event.Released, "k", owner, lease, time.Duration(2*i+1)*time.Millisecond, 0, strings.Repeat("r", MaxReasonBytes))
		agg.Apply([]event.Event{e, r})
		applied = append(applied, e, r)
	}
	sh, h := agg.keys.find("k")
	k := sh.get(h, "k")
	if c := cap(k.recent); c > maxRingBytes {
		t.Errorf("ring buffer of %d bytes, want at most %d", c, maxRingBytes)
	}
	d, _ := agg.Lock("k")
	if len(d.Recent) < 2 || len(d.Recent) >= DefaultRecentEvents {
		t.Fatalf("recent events = %d, want fewer than %d (their strings are long) and at least 2", len(d.Recent), DefaultRecentEvents)
	}
	for i, e := range d.Recent {
		if want := applied[len(applied)-1-i]; e.Owner != want.Owner || e.Type != want.Type {
			t.Fatalf("Recent[%d] = %s by %.8s..., want %s by %.8s... (newest first)", i, e.Type, e.Owner, want.Type, want.Owner)
		}
	}
	if d.Acquisitions != 64 || d.Hold.Count != 64 || d.Wait.Count != 64 {
		t.Errorf("acquisitions %d, holds %d, waits %d observed; want 64 each", d.Acquisitions, d.Hold.Count, d.Wait.Count)
	}
	checkCosts(t, agg)
}

// Past Config.MaxBytes the least recently active keys are evicted, as past
// MaxKeys: a stream of long strings keeps fewer keys, never more memory.
func TestByteBudgetEvicts(t *testing.T) {
	const maxBytes = 256 << 10
	agg, clk := newTestAggregator(t, Config{MaxKeys: 10_000, MaxBytes: maxBytes})
	clk.Set(aggT0.Add(time.Hour))
	fillIntern(agg)
	const n = 2000
	key := func(i int) string { return fmt.Sprintf("%04d:", i) + strings.Repeat("k", MaxKeyBytes-5) }
	for i := range n {
		owner := fmt.Sprintf("%04d", i) + strings.Repeat("o", MaxTextBytes-4)
		var evs []event.Event
		for j := range 8 {
			at := time.Duration(i*8+j) * time.Millisecond
			evs = append(evs, acquired(key(i), owner, fmt.Sprint("L", i, "-", j), at, 0, 1, time.Hour),
				ended(event.Released, key(i), owner, fmt.Sprint("L", i, "-", j), at, 0, strings.Repeat("r", MaxReasonBytes)))
		}
		agg.Apply(evs)
	}
	checkCosts(t, agg)
	total := 0
	for i := range agg.keys.shards {
		total += agg.keys.shards[i].bytes
	}
	if total > maxBytes {
		t.Errorf("tracked keys cost %d bytes, want at most %d", total, maxBytes)
	}
	tracked := agg.Overview().TrackedKeys
	if tracked >= n || tracked < 20 {
		t.Errorf("tracked keys = %d, want fewer than the %d sent (the budget holds some %d of their size) and some", tracked, n, maxBytes/(5<<10))
	}
	if _, ok := agg.Lock(key(n - 1)); !ok {
		t.Error("the most recent key was evicted")
	}
	if _, ok := agg.Lock(key(0)); ok {
		t.Error("the least recent key is still tracked")
	}
	if got := len(agg.Locks(LockQuery{Limit: maxPageSize}).Locks); got != min(tracked, maxPageSize) {
		t.Errorf("Locks lists %d keys, want %d: TrackedKeys counts what is tracked", got, min(tracked, maxPageSize))
	}
}

// Blocking lists at most maxBlocking holders and cycles, those with the
// most waiters first, and counts them all.
func TestBlockingBounded(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(time.Minute))
	const keys = 3 * maxBlocking
	var evs []event.Event
	for i := range keys {
		a, b := fmt.Sprint("a", i), fmt.Sprint("b", i)
		evs = append(evs, acquired(a, "A", "LA"+a, 0, 0, 1, time.Hour), acquired(b, "B", "LB"+b, 0, 0, 1, time.Hour))
		// A deadlock per pair, and i+1 more waiters on a.
		w := func(key, owner, lease string, holds ...string) event.Event {
			e := ev(event.Waiting, key, owner, lease, time.Second)
			e.Wait, e.Reason = time.Hour, event.JoinLeases(holds)
			return e
		}
		evs = append(evs, w(b, "A", "WA"+a, "LA"+a), w(a, "B", "WB"+b, "LB"+b))
		for j := range i % 5 {
			evs = append(evs, w(a, "C", fmt.Sprint("WC", i, "-", j)))
		}
	}
	agg.Apply(evs)
	bl := agg.Blocking()
	if len(bl.Holders) != maxBlocking || bl.HoldersTotal != 2*keys {
		t.Errorf("Blocking lists %d holders of %d, want %d of %d", len(bl.Holders), bl.HoldersTotal, maxBlocking, 2*keys)
	}
	if bl.Holders[0].Waiters != 5 || bl.Holders[len(bl.Holders)-1].Waiters < 1 {
		t.Errorf("holders by waiters: first %d, last %d; want 5 first", bl.Holders[0].Waiters, bl.Holders[len(bl.Holders)-1].Waiters)
	}
	if len(bl.Cycles) != maxBlocking || bl.CyclesTotal != keys {
		t.Errorf("Blocking lists %d cycles of %d, want %d of %d", len(bl.Cycles), bl.CyclesTotal, maxBlocking, keys)
	}
	if len(bl.Chains) > 2*maxBlocking {
		t.Errorf("Blocking lists %d chains, want at most %d", len(bl.Chains), 2*maxBlocking)
	}
}

// Waiters with every string at its limit stop being added at
// maxWaiterBytes, well before maxWaiters.
func TestWaitersBoundedInBytes(t *testing.T) {
	agg, _ := newTestAggregator(t, Config{})
	pad := func(i int, n int) string { return fmt.Sprintf("%06d", i) + strings.Repeat("x", n-6) }
	var evs []event.Event
	for i := range 30_000 {
		e := ev(event.Waiting, pad(i, MaxKeyBytes), pad(i, MaxTextBytes), pad(i, MaxTextBytes), 0)
		e.Holder, e.Reason, e.Wait = pad(i, MaxTextBytes), pad(i, MaxReasonBytes), time.Minute
		evs = append(evs, e)
	}
	agg.Apply(evs)
	n := agg.Overview().Waiters
	if max := maxWaiterBytes / (waiterOverhead + MaxKeyBytes + 3*MaxTextBytes + MaxReasonBytes); n > max+1 || n < max/2 {
		t.Errorf("waiters = %d, want at most %d (the byte bound) and not far fewer", n, max)
	}
	if agg.waits.bytes > maxWaiterBytes {
		t.Errorf("waiters cost %d bytes, want at most %d", agg.waits.bytes, maxWaiterBytes)
	}
}

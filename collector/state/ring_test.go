package state

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/event"
)

func TestRecordRoundTrip(t *testing.T) {
	long := strings.Repeat("\xff<script>\"'\n", 40)
	refs := []ref{{}, {s: "A", id: 1}, {s: "inline"}, {s: long}, {s: "\x00"}, {s: "x", id: maxInterned}}
	var recs []record
	for i, typ := range event.Types() {
		for j, s := range refs {
			r := record{ts: int64(1e18) + int64(i*1e9) - int64(j), d: int64(j) - 2, fence: int64(i) << 40, attempts: int32(j) - 1,
				typ: typ, flags: uint8(j % 4), owner: s, lease: ref{s: refs[(j+2)%len(refs)].s}, reason: refs[(j+1)%len(refs)], who: s}
			switch typ {
			case event.Acquired:
				r.ttlMS = 1<<31 - 1
			case event.Renewed:
				r.headroom = int64(j)*int64(time.Hour) + 1
			}
			if j%2 == 0 {
				r.trace = event.TraceID{0: byte(i + 1), 15: byte(j)}
			}
			switch j % 3 {
			case 1:
				r.obs, r.at = obsWait|obsAcq, r.ts+int64(j)*1e6
			case 2:
				r.obs, r.hold = obsHold|obsHoldAt, -7
			}
			recs = append(recs, r)
		}
	}
	base := int64(1e18) + 5e9
	var b []byte
	for i := range recs {
		b = appendRecord(b, &recs[i], base)
	}
	for i, want := range recs {
		n, obs := skipRecord(b)
		var got record
		if m := decodeRecord(b, base, &got, true); m != n || obs != want.obs {
			t.Fatalf("record %d: decoded %d bytes, skipped %d (obs %b, want %b)", i, m, n, obs, want.obs)
		}
		// Interned strings come back as ids only.
		for _, r := range []*ref{&want.owner, &want.lease, &want.reason, &want.who} {
			if r.id != 0 {
				r.s = ""
			}
		}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(record{}, ref{})); diff != "" {
			t.Fatalf("record %d round trip (-want +got):\n%s", i, diff)
		}
		if n > maxRecordLen(&recs[i]) {
			t.Fatalf("record %d: %d bytes, over maxRecordLen %d", i, n, maxRecordLen(&recs[i]))
		}
		b = b[n:]
	}
}

// TestRingKeepsNewest checks Recent against the events applied, through
// batched trimming, compaction and growth, with records of very different
// sizes (owners up to and past MaxTextBytes).
func TestRingKeepsNewest(t *testing.T) {
	for _, ring := range []int{1, 2, 5, 32} {
		a, clk := newTestAggregator(t, Config{RecentEvents: ring})
		clk.Set(aggT0.Add(time.Hour))
		var applied []event.Event
		for i := range 300 {
			owner := strings.Repeat(string(rune('a'+i%26)), 1+(i*37)%700)
			lease := fmt.Sprint("lease-", i/3)
			var e event.Event
			switch i % 3 {
			case 0:
				e = acquired("r:1", owner, lease, time.Duration(i)*time.Millisecond, time.Duration(i), 1+i%4, time.Minute)
			case 1:
				e = failed("r:1", owner, time.Duration(i)*time.Millisecond, time.Duration(i), 2, event.ReasonHeld)
				e.Holder = owner + "-holder"
			case 2:
				e = renewed("r:1", owner, lease, time.Duration(i)*time.Millisecond, time.Duration(i)*time.Second)
			}
			e.Fence = int64(i)
			a.Apply([]event.Event{e})
			e.Owner, e.Holder = cutString(e.Owner, MaxTextBytes), cutString(e.Holder, MaxTextBytes)
			applied = append(applied, e)
			want := slices.Clone(applied[max(0, len(applied)-ring):])
			slices.Reverse(want)
			got := mustLock(t, a, "r:1").Recent
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("ring %d, after event %d: Recent (-want +got):\n%s", ring, i, diff)
			}
		}
	}
}

// TestFiguresIndependentOfRing applies one random history, with every kind
// of event, late and superseded ones, expiries by Tick and by keyspace
// notification, to aggregators whose rings differ in length, and compares
// everything they answer. A short ring moves a key's figures into keyStats
// at once; a long one keeps them in its records and replays them: both must
// give the same figures.
func TestFiguresIndependentOfRing(t *testing.T) {
	rings := []int{1, 2, 7, 1000}
	aggs := make([]*Aggregator, len(rings))
	clocks := make([]*aggClock, len(rings))
	for i, n := range rings {
		aggs[i], clocks[i] = newTestAggregator(t, Config{RecentEvents: n, StuckAfter: 20 * time.Second})
	}
	rng := rand.New(rand.NewPCG(5, 6))
	const nkeys = 40
	keys := make([]string, nkeys)
	leases := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k:%d", i)
	}
	owners := []string{"A", "B", "C"}
	now := time.Duration(0)
	compare := func(step int) {
		t.Helper()
		ref := aggs[len(aggs)-1]
		for i, a := range aggs[:len(aggs)-1] {
			for _, k := range keys {
				d1, ok1 := a.Lock(k)
				d2, ok2 := ref.Lock(k)
				if ok1 != ok2 {
					t.Fatalf("step %d, ring %d: Lock(%q) ok = %v, ring %d: %v", step, rings[i], k, ok1, rings[len(rings)-1], ok2)
				}
				// The shorter ring's events are the newest of the longer's.
				if !slices.Equal(d1.Recent, d2.Recent[:min(len(d2.Recent), len(d1.Recent))]) {
					t.Fatalf("step %d, ring %d: Lock(%q).Recent = %+v, want the newest of %+v", step, rings[i], k, d1.Recent, d2.Recent)
				}
				d1.Recent, d2.Recent = nil, nil
				if diff := cmp.Diff(d2, d1); diff != "" {
					t.Fatalf("step %d, ring %d vs %d: Lock(%q) (-long +short):\n%s", step, rings[i], rings[len(rings)-1], k, diff)
				}
			}
			for _, q := range []LockQuery{{}, {Sort: SortWait}, {Sort: SortHold, HeldOnly: true}} {
				q.Limit = nkeys
				if diff := cmp.Diff(ref.Locks(q), a.Locks(q)); diff != "" {
					t.Fatalf("step %d, ring %d: Locks(%+v) (-long +short):\n%s", step, rings[i], q, diff)
				}
			}
			if diff := cmp.Diff(ref.Overview(), a.Overview()); diff != "" {
				t.Fatalf("step %d, ring %d: Overview (-long +short):\n%s", step, rings[i], diff)
			}
			if diff := cmp.Diff(ref.Expirations(0), a.Expirations(0)); diff != "" {
				t.Fatalf("step %d, ring %d: Expirations (-long +short):\n%s", step, rings[i], diff)
			}
		}
		for _, a := range aggs {
			checkCosts(t, a)
		}
	}
	for step := range 2000 {
		now += time.Duration(rng.IntN(400)) * time.Millisecond
		if rng.IntN(50) == 0 {
			now += time.Duration(rng.IntN(40)) * time.Second // let holds lapse, series steps pass
		}
		ki := rng.IntN(nkeys)
		key, owner := keys[ki], owners[rng.IntN(len(owners))]
		// Events arrive up to 2 s late; some are from before the last one.
		at := max(0, now-time.Duration(rng.IntN(2000))*time.Millisecond)
		ttl := time.Duration(1+rng.IntN(8)) * time.Second
		lease := leases[ki]
		if rng.IntN(5) == 0 {
			lease = fmt.Sprint("stale-", rng.IntN(3))
		}
		var e event.Event
		switch rng.IntN(12) {
		case 0, 1, 2:
			leases[ki] = fmt.Sprint("L", step)
			e = acquired(key, owner, leases[ki], at, time.Duration(rng.IntN(3000))*time.Millisecond, 1+rng.IntN(3), ttl)
		case 3:
			e = failed(key, owner, at, time.Duration(rng.IntN(3000))*time.Millisecond, 1, []string{event.ReasonHeld, event.ReasonTimeout}[rng.IntN(2)])
		case 4, 5:
			e = ended(event.Released, key, owner, lease, at, time.Duration(rng.IntN(2))*time.Duration(rng.IntN(5000))*time.Millisecond, "")
		case 6:
			e = ended(event.Released, key, owner, lease, at, time.Second, event.ReasonNotOwner)
		case 7:
			e = ended(event.Lost, key, owner, lease, at, 0, "")
		case 8:
			e = renewed(key, owner, lease, at, ttl)
		case 9:
			e = ended(event.Forced, key, owner, lease, at, 0, "ops")
			e.By = "op"
		case 10:
			e = ended(event.Expired, key, owner, lease, at, 0, "")
			e.Passive = rng.IntN(2) == 0
		case 11:
			e = event.Event{Type: event.RenewFailed, Key: key, Owner: owner, Lease: lease, TS: aggT0.Add(at).UnixNano(), Reason: event.ReasonError}
		}
		expire := rng.IntN(40) == 0
		for i, a := range aggs {
			clocks[i].Set(aggT0.Add(now))
			a.Apply([]event.Event{e})
			if step%7 == 0 {
				a.Tick()
			}
			if expire {
				a.KeyExpired(key)
			}
		}
		if step%250 == 249 {
			compare(step)
		}
	}
	compare(2000)
	var built int
	for i := range aggs[0].keys.shards {
		aggs[0].keys.shards[i].each(func(k *keyState) {
			if k.stats != nil {
				built++
			}
		})
	}
	if built == 0 {
		t.Errorf("no key of the 1-event ring built keyStats: the test does not compare the two paths")
	}
}

// TestInternTableFull: past maxInterned distinct strings, records store
// them inline; both kinds read back.
func TestInternTableFull(t *testing.T) {
	a, _ := newTestAggregator(t, Config{})
	const n = maxInterned + 500
	for i := range n {
		e := failed(fmt.Sprint("it:", i), fmt.Sprint("owner-", i), 0, time.Millisecond, 1, event.ReasonHeld)
		e.Holder = fmt.Sprint("holder-", i)
		a.Apply([]event.Event{e})
	}
	if a.tab.n != maxInterned {
		t.Fatalf("intern table holds %d strings, want it full at %d", a.tab.n, maxInterned)
	}
	for _, i := range []int{0, 1, maxInterned/2 - 1, maxInterned / 2, n - 1} {
		r := mustLock(t, a, fmt.Sprint("it:", i)).Recent
		if len(r) != 1 || r[0].Owner != fmt.Sprint("owner-", i) || r[0].Holder != fmt.Sprint("holder-", i) || r[0].Reason != event.ReasonHeld {
			t.Errorf("Lock(it:%d).Recent = %+v, want one failed event by owner-%d, holder-%d, reason held", i, r, i, i)
		}
	}
}

// TestEvictedSlotReuse: an evicted key's slot goes to the next new key;
// what pointed at the old key (its expiry entry) must not act on the new
// one, and the new key starts from nothing.
func TestEvictedSlotReuse(t *testing.T) {
	a, clk := newTestAggregator(t, Config{MaxKeys: 1})
	a.Apply([]event.Event{acquired("old", "A", "L1", 0, time.Second, 3, 10*time.Second)})
	// "old" is held and the only key: tracking "new" evicts it.
	a.Apply([]event.Event{acquired("new", "B", "L2", time.Second, time.Millisecond, 1, 20*time.Second)})
	if _, ok := a.Lock("old"); ok {
		t.Fatalf("Lock(old) known after eviction, want unknown")
	}
	clk.Set(aggT0.Add(15 * time.Second)) // past old's expiry and grace, not new's
	a.Tick()
	d := mustLock(t, a, "new")
	if !d.Held || d.Owner != "B" || d.Acquisitions != 1 || d.Contentions != 0 || d.Wait.Count != 1 || len(d.Recent) != 1 {
		t.Errorf("Lock(new) = held %v, owner %q, %d acquisitions, %d contentions, %d waits, %d events; want held by B, 1, 0, 1, 1",
			d.Held, d.Owner, d.Acquisitions, d.Contentions, d.Wait.Count, len(d.Recent))
	}
	if e := a.Expirations(0); len(e) != 0 {
		t.Errorf("Expirations() = %+v, want none (the old key's expiry must not hit the new key)", e)
	}
	clk.Set(aggT0.Add(25 * time.Second))
	a.Tick()
	if e := a.Expirations(0); len(e) != 1 || e[0].Key != "new" {
		t.Errorf("Expirations() = %+v, want new's", e)
	}
}

// TestShardIndexChurn adds and removes keys at random, as a shard that
// evicts does, with hashes drawn from a few values so that runs of entries
// collide, wrap around the end of the index and are shifted back by
// deletions; every key present must be found and no other.
func TestShardIndexChurn(t *testing.T) {
	tab := newKeyTable(1000, 1000*DefaultBytesPerKey)
	sh := &tab.shards[0]
	r := rand.New(rand.NewPCG(1, 2))
	hashOf := func(i int) uint64 {
		// Top bits (the index's) from 12 values near the index's end, low
		// bits distinct.
		return uint64(1<<32-6+i%12)<<32 | uint64(i)
	}
	present := map[string]*keyState{}
	var order []string
	for step := range 20_000 {
		if len(present) > 0 && (len(present) >= sh.cap || r.IntN(3) == 0) {
			i := r.IntN(len(order))
			key := order[i]
			order[i] = order[len(order)-1]
			order = order[:len(order)-1]
			sh.del(present[key])
			sh.release(present[key])
			delete(present, key)
		} else {
			n := r.IntN(1_000_000)
			key := fmt.Sprintf("k%d-%s", n, strings.Repeat("x", n%20))
			if _, ok := present[key]; ok {
				continue
			}
			k := sh.alloc()
			k.key = key
			sh.put(hashOf(n), k)
			present[key] = k
			order = append(order, key)
		}
		if step%197 != 0 {
			continue
		}
		if sh.count != len(present) {
			t.Fatalf("step %d: count = %d, want %d", step, sh.count, len(present))
		}
		for key, k := range present {
			var n int
			fmt.Sscanf(key, "k%d", &n)
			if got := sh.get(hashOf(n), key); got != k {
				t.Fatalf("step %d: get(%q) = %p, want %p", step, key, got, k)
			}
			if got := sh.get(hashOf(n), key+"?"); got != nil {
				t.Fatalf("step %d: get(%q) = %q, want nil", step, key+"?", got.key)
			}
		}
	}
}

// TestShardIndexCollisions drives the shard index with colliding hashes,
// which maphash gives too rarely to meet otherwise.
func TestShardIndexCollisions(t *testing.T) {
	tab := newKeyTable(100, 100*DefaultBytesPerKey)
	sh := &tab.shards[0]
	keys := []string{"x", "y", "z"}
	states := map[string]*keyState{}
	for _, k := range keys {
		s := sh.alloc()
		s.key = k
		states[k] = s
		sh.put(42, s)
	}
	check := func(present ...string) {
		t.Helper()
		for _, k := range []string{"w", "x", "y", "z"} {
			got := sh.get(42, k)
			if want := slices.Contains(present, k); (got != nil) != want || got != nil && got.key != k {
				t.Errorf("get(%q) = %v, want present %v", k, got, want)
			}
		}
		if sh.count != len(present) {
			t.Errorf("count = %d, want %d", sh.count, len(present))
		}
	}
	check("x", "y", "z")
	sh.del(states["x"]) // the first of the run
	check("y", "z")
	w := sh.alloc()
	w.key = "w"
	sh.put(42, w)
	check("w", "y", "z")
	sh.del(states["z"]) // the last of the run
	check("w", "y")
	if sh.get(43, "y") != nil && sh.get(43, "y") != states["y"] {
		t.Errorf("get with another hash found a different key")
	}
}

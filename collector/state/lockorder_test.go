package state

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/event"
)

// nested is an acquisition of key by owner under lease while holding the
// leases held (innermost first), at T0+at, with a minute's TTL.
func nested(key, owner, lease string, at time.Duration, held ...string) event.Event {
	e := acquired(key, owner, lease, at, 0, 1, time.Minute)
	e.Reason = event.JoinLeases(held)
	return e
}

// edgeSummary is what the tests compare of an edge.
type edgeSummary struct {
	From, To       string
	Count          int64
	Owners         []string
	More           bool
	FromKey, ToKey string
	First, Last    time.Duration // since aggT0
}

func summarize(es []OrderEdge) []edgeSummary {
	out := []edgeSummary{}
	for _, e := range es {
		out = append(out, edgeSummary{e.From, e.To, e.Count, e.Owners, e.MoreOwners, e.FromKey, e.ToKey,
			e.FirstSeen.Sub(aggT0), e.LastSeen.Sub(aggT0)})
	}
	return out
}

// applyAt moves the clock to T0+at and applies evs.
func applyAt(agg *Aggregator, clk *aggClock, at time.Duration, evs ...event.Event) {
	clk.Set(aggT0.Add(at))
	agg.Apply(evs)
}

// Two services take order:* then inventory:* and inventory:* then order:*
// an hour apart, never waiting: one inversion, with both orders, their
// owners, example keys and times. invoice:* then ledger:*, taken by five
// services a hundred times in one order, is one edge and no inversion.
func TestLockOrderInversionWithoutADeadlock(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	s := time.Second
	applyAt(agg, clk, 10*s,
		nested("order:1", "svc-a", "A1", 10*s),
		nested("inventory:1", "svc-a", "A2", 10*s, "A1"),
		ended(event.Released, "inventory:1", "svc-a", "A2", 10*s, 0, ""),
		ended(event.Released, "order:1", "svc-a", "A1", 10*s, 0, ""))
	var evs []event.Event
	for i := range 100 {
		owner := fmt.Sprintf("billing-%d", i%5)
		out, in := fmt.Sprintf("I%d", i), fmt.Sprintf("L%d", i)
		evs = append(evs, nested(fmt.Sprintf("invoice:%d", i), owner, out, 20*s),
			nested(fmt.Sprintf("ledger:%d", i), owner, in, 20*s, out),
			ended(event.Released, fmt.Sprintf("ledger:%d", i), owner, in, 20*s, 0, ""),
			ended(event.Released, fmt.Sprintf("invoice:%d", i), owner, out, 20*s, 0, ""))
	}
	applyAt(agg, clk, 20*s, evs...)
	agg.Tick()
	if n := agg.LockOrderInversions(); n != 0 {
		t.Fatalf("inversions with every order taken one way = %d, want 0", n)
	}
	applyAt(agg, clk, time.Hour,
		nested("inventory:7", "svc-b", "B1", time.Hour),
		nested("order:7", "svc-b", "B2", time.Hour, "B1"),
		nested("order:7", "svc-b", "B2", time.Hour, "B1")) // the same entry twice: counted once
	agg.Tick()

	lo := agg.LockOrder("")
	want := []edgeSummary{
		{"inventory:*", "order:*", 1, []string{"svc-b"}, false, "inventory:7", "order:7", time.Hour, time.Hour},
		{"invoice:*", "ledger:*", 100, []string{"billing-0", "billing-1", "billing-2", "billing-3", "billing-4"}, false, "invoice:99", "ledger:99", 20 * s, 20 * s},
		{"order:*", "inventory:*", 1, []string{"svc-a"}, false, "order:1", "inventory:1", 10 * s, 10 * s},
	}
	if d := cmp.Diff(want, summarize(lo.Edges)); d != "" {
		t.Errorf("edges (-want +got):\n%s", d)
	}
	if n := agg.LockOrderInversions(); n != 1 || len(lo.Inversions) != 1 {
		t.Fatalf("inversions = %d (%d listed), want 1", n, len(lo.Inversions))
	}
	in := lo.Inversions[0]
	if d := cmp.Diff([]string{"inventory:*", "order:*"}, in.Classes); d != "" {
		t.Errorf("inversion classes (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]edgeSummary{want[0], want[2]}, summarize(in.Orders)); d != "" {
		t.Errorf("inversion orders (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"svc-b", "svc-a"}, in.Owners); d != "" {
		t.Errorf("inversion owners (-want +got):\n%s", d)
	}
	if !in.FirstSeen.Equal(aggT0.Add(time.Hour)) || !in.LastSeen.Equal(aggT0.Add(time.Hour)) {
		t.Errorf("inversion first/last seen = %v, %v; want both T0+1h (when the second order closed it)", in.FirstSeen, in.LastSeen)
	}
	if lo.Window != DefaultLockOrderWindow {
		t.Errorf("window = %v, want the default %v", lo.Window, DefaultLockOrderWindow)
	}

	// By class: the healthy pair's page shows its edge and no inversion;
	// order:*'s shows both orders and the inversion.
	if got := agg.LockOrder("ledger:*"); len(got.Edges) != 1 || got.Edges[0].From != "invoice:*" || len(got.Inversions) != 0 {
		t.Errorf("LockOrder(ledger:*) = %+v, want its one edge and no inversion", got)
	}
	if got := agg.LockOrder("order:*"); len(got.Edges) != 2 || len(got.Inversions) != 1 {
		t.Errorf("LockOrder(order:*) = %d edges, %d inversions; want 2 and 1", len(got.Edges), len(got.Inversions))
	}
}

// A class taken while holding the same class (a re-entrant or read lock,
// or a second key of the class) makes no self-loop, nor does the overflow
// class make edges, nor a lease the call holds of its own key.
func TestLockOrderNoSelfLoops(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{MaxClasses: 2})
	applyAt(agg, clk, time.Second,
		nested("order:1", "svc", "O1", time.Second),
		nested("order:2", "svc", "O2", time.Second, "O1"),
		nested("order:1", "svc", "O3", time.Second, "O1", "O2"), // re-entrant
		nested("stock:1", "svc", "S1", time.Second),
		nested("gift:1", "svc", "G1", time.Second, "O1"), // a third class: other
		nested("stock:2", "svc", "S2", time.Second, "G1"),
		nested("order:3", "svc", "O4", time.Second, "O4"))
	agg.Tick()
	lo := agg.LockOrder("")
	if len(lo.Edges) != 0 || agg.LockOrderInversions() != 0 {
		t.Errorf("edges = %+v, inversions %d; want none", summarize(lo.Edges), agg.LockOrderInversions())
	}
}

// An edge not seen for the window ages out, and the inversion with it: a
// fixed inversion stops being reported. The order still taken stays.
func TestLockOrderAgesOut(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{LockOrderWindow: time.Hour})
	s := time.Second
	applyAt(agg, clk, s, nested("a:1", "x", "X1", s), nested("b:1", "x", "X2", s, "X1"))
	applyAt(agg, clk, 2*s, nested("b:2", "y", "Y1", 2*s), nested("a:2", "y", "Y2", 2*s, "Y1"))
	agg.Tick()
	if n := agg.LockOrderInversions(); n != 1 {
		t.Fatalf("inversions = %d, want 1", n)
	}
	// a:* → b:* is taken again at 50 min; b:* → a:* (fixed) never again.
	applyAt(agg, clk, 50*time.Minute, nested("a:3", "x", "X3", 50*time.Minute), nested("b:3", "x", "X4", 50*time.Minute, "X3"))
	clk.Set(aggT0.Add(time.Hour + s)) // b:* → a:* last seen 59m59s ago
	agg.Tick()
	if n := agg.LockOrderInversions(); n != 1 {
		t.Fatalf("inversions within the window = %d, want 1", n)
	}
	clk.Set(aggT0.Add(time.Hour + 3*s))
	agg.Tick()
	lo := agg.LockOrder("")
	if n := agg.LockOrderInversions(); n != 0 || len(lo.Inversions) != 0 {
		t.Errorf("inversions once b:* → a:* is older than the window = %d (%d listed), want 0", n, len(lo.Inversions))
	}
	want := []edgeSummary{{"a:*", "b:*", 2, []string{"x"}, false, "a:3", "b:3", s, 50 * time.Minute}}
	if d := cmp.Diff(want, summarize(lo.Edges)); d != "" {
		t.Errorf("edges after the window (-want +got):\n%s", d)
	}
}

// A longer cycle is an inversion too; every edge on a cycle is in the
// shortest one through it.
func TestLockOrderLongerCycles(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	s := time.Second
	order := func(from, to string, at time.Duration) []event.Event {
		l := from + to + at.String()
		return []event.Event{nested(from+":1", "svc-"+from, l+"o", at), nested(to+":1", "svc-"+from, l+"i", at, l+"o")}
	}
	var evs []event.Event
	for i, p := range [][2]string{{"a", "b"}, {"b", "c"}, {"c", "a"}, {"c", "d"}} {
		evs = append(evs, order(p[0], p[1], time.Duration(i+1)*s)...)
	}
	applyAt(agg, clk, 5*s, evs...)
	agg.Tick()
	lo := agg.LockOrder("")
	var got [][]string
	for _, in := range lo.Inversions {
		got = append(got, in.Classes)
	}
	if d := cmp.Diff([][]string{{"a:*", "b:*", "c:*"}}, got); d != "" {
		t.Errorf("inversions (-want +got):\n%s", d)
	}
	if len(lo.Inversions) == 1 {
		in := lo.Inversions[0]
		var orders []string
		for _, o := range in.Orders {
			orders = append(orders, o.From+">"+o.To)
		}
		if d := cmp.Diff([]string{"a:*>b:*", "b:*>c:*", "c:*>a:*"}, orders); d != "" {
			t.Errorf("orders (-want +got):\n%s", d)
		}
		if !in.FirstSeen.Equal(aggT0.Add(3 * s)) {
			t.Errorf("first seen = %v, want T0+3s, when c:* → a:* closed the cycle", in.FirstSeen.Sub(aggT0))
		}
	}
	applyAt(agg, clk, 6*s, order("b", "a", 6*s)...)
	agg.Tick()
	got = nil
	for _, in := range agg.LockOrder("").Inversions {
		got = append(got, in.Classes)
	}
	if d := cmp.Diff([][]string{{"a:*", "b:*"}, {"a:*", "b:*", "c:*"}}, got); d != "" {
		t.Errorf("inversions with b:* → a:* too (-want +got):\n%s", d)
	}
	if n := agg.LockOrderInversions(); n != 2 {
		t.Errorf("LockOrderInversions = %d, want 2", n)
	}
}

// An acquisition read before the acquired event of the lease it holds (two
// partitions) counts once that event comes; a held lease never seen makes
// no edge and is forgotten.
func TestLockOrderHeldLeaseReadLate(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	s := time.Second
	applyAt(agg, clk, s, nested("inventory:1", "svc", "I1", s, "O1"), nested("ledger:1", "svc", "L1", s, "ghost"))
	applyAt(agg, clk, 2*s, nested("order:1", "svc", "O1", s))
	agg.Tick()
	want := []edgeSummary{{"order:*", "inventory:*", 1, []string{"svc"}, false, "order:1", "inventory:1", s, s}}
	if d := cmp.Diff(want, summarize(agg.LockOrder("").Edges)); d != "" {
		t.Errorf("edges (-want +got):\n%s", d)
	}
	clk.Set(aggT0.Add(20 * s))
	agg.Tick()
	if n := len(agg.order.pending); n != 0 {
		t.Errorf("%d acquisitions still wait for their held lease %v after, want 0", n, orderPendingFor)
	}
}

// Holds are forgotten once they ended, or their TTL lapsed, a grace later:
// the leases the graph knows stay bounded by the holds alive.
func TestLockOrderForgetsEndedHolds(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	s := time.Second
	var evs []event.Event
	for i := range 1000 {
		l := fmt.Sprint("L", i)
		evs = append(evs, nested(fmt.Sprint("k:", i), "svc", l, s))
		if i%2 == 0 {
			evs = append(evs, ended(event.Released, fmt.Sprint("k:", i), "svc", l, s, 0, ""))
		}
	}
	applyAt(agg, clk, s, evs...)
	if n := len(agg.order.holds); n != 1000 {
		t.Fatalf("holds known = %d, want 1000", n)
	}
	clk.Set(aggT0.Add(s + orderHoldGrace + orderPruneEvery + s))
	agg.Tick()
	if n := len(agg.order.holds); n != 500 {
		t.Errorf("holds known after the released ones' grace = %d, want the 500 still held", n)
	}
	clk.Set(aggT0.Add(s + time.Minute + orderHoldGrace + 2*orderPruneEvery))
	agg.Tick()
	if n, b := len(agg.order.holds), agg.order.holdBytes; n != 0 || b != 0 {
		t.Errorf("holds known after their TTL and grace = %d (%d bytes), want none", n, b)
	}
}

// The graph is bounded: past MaxOrderEdges new orders are counted as
// dropped, and an edge lists MaxOrderOwners owners.
func TestLockOrderBounds(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	var evs []event.Event
	n := 0
	for i := range 40 {
		for j := range 40 {
			if i == j {
				continue
			}
			o, in := fmt.Sprint("O", n), fmt.Sprint("I", n)
			evs = append(evs, nested(fmt.Sprintf("c%d:1", i), "svc", o, time.Second),
				nested(fmt.Sprintf("c%d:1", j), "svc", in, time.Second, o))
			n++
		}
	}
	for i := range 20 {
		o, in := fmt.Sprint("PO", i), fmt.Sprint("PI", i)
		evs = append(evs, nested("c0:1", fmt.Sprint("owner-", i), o, time.Second),
			nested("c1:1", fmt.Sprint("owner-", i), in, time.Second, o))
	}
	applyAt(agg, clk, time.Second, evs...)
	agg.Tick()
	lo := agg.LockOrder("")
	if len(lo.Edges) != MaxOrderEdges || lo.Dropped != int64(n-MaxOrderEdges) {
		t.Errorf("edges = %d, dropped %d; want %d and %d", len(lo.Edges), lo.Dropped, MaxOrderEdges, n-MaxOrderEdges)
	}
	i := slices.IndexFunc(lo.Edges, func(e OrderEdge) bool { return e.From == "c0:*" && e.To == "c1:*" })
	if i < 0 {
		t.Fatal("no edge c0:* → c1:*")
	}
	if e := lo.Edges[i]; len(e.Owners) != MaxOrderOwners || !e.MoreOwners || e.Count != 21 {
		t.Errorf("c0:* → c1:* = %d owners (more: %v), count %d; want %d, true, 21", len(e.Owners), e.MoreOwners, e.Count, MaxOrderOwners)
	}
}

// orderSink keeps what the state hands its store.
type orderSink struct {
	mu    sync.Mutex
	edges map[[2]string]OrderEdge
}

func (s *orderSink) LockOrderEdges(es []OrderEdge) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range es {
		s.edges[[2]string{e.From, e.To}] = e
	}
}

// Changed edges go to the sink at the next scan. A restarted state restores
// them: acquisitions replayed from the stream at or before an edge's last
// seen time are counted in it already, later ones add to it; edges out of
// the window, self-loops and the overflow class are not restored.
func TestLockOrderRestore(t *testing.T) {
	sink := &orderSink{edges: map[[2]string]OrderEdge{}}
	agg, clk := newTestAggregator(t, Config{LockOrder: sink})
	s := time.Second
	applyAt(agg, clk, s, nested("order:1", "svc-a", "A1", s), nested("inventory:1", "svc-a", "A2", s, "A1"))
	late := 2*s + 1500*time.Microsecond // not a whole millisecond: the store keeps milliseconds
	applyAt(agg, clk, late, nested("order:2", "svc-a", "A3", late), nested("inventory:2", "svc-a", "A4", late, "A3"))
	agg.Tick()
	got, ok := sink.edges[[2]string{"order:*", "inventory:*"}]
	if !ok || got.Count != 2 || !got.LastSeen.Equal(aggT0.Add(late)) {
		t.Fatalf("sink has %+v, want order:* → inventory:* twice, last at T0+2.0015s", sink.edges)
	}
	clear(sink.edges)
	agg.Tick()
	if len(sink.edges) != 0 {
		t.Errorf("an unchanged edge was handed to the sink again: %+v", sink.edges)
	}

	re, clk2 := newTestAggregator(t, Config{LockOrderWindow: time.Hour})
	clk2.Set(aggT0.Add(3 * s))
	// As the store gives it back: in milliseconds.
	got.FirstSeen, got.LastSeen = got.FirstSeen.Truncate(time.Millisecond), got.LastSeen.Truncate(time.Millisecond)
	re.RestoreLockOrder([]OrderEdge{got,
		{From: "old:*", To: "older:*", Count: 5, FirstSeen: aggT0.Add(-3 * time.Hour), LastSeen: aggT0.Add(-2 * time.Hour)},
		{From: "self:*", To: "self:*", Count: 5, FirstSeen: aggT0, LastSeen: aggT0},
		{From: otherClass, To: "self:*", Count: 5, FirstSeen: aggT0, LastSeen: aggT0}})
	// The stream replayed: the two acquisitions the store counted, and a
	// third after them.
	re.Apply([]event.Event{nested("order:1", "svc-a", "A1", s), nested("inventory:1", "svc-a", "A2", s, "A1"),
		nested("order:2", "svc-a", "A3", late), nested("inventory:2", "svc-a", "A4", late, "A3"),
		nested("order:3", "svc-c", "C1", 3*s), nested("inventory:3", "svc-c", "C2", 3*s, "C1")})
	re.Tick()
	want := []edgeSummary{{"order:*", "inventory:*", 3, []string{"svc-a", "svc-c"}, false, "order:3", "inventory:3", s, 3 * s}}
	if d := cmp.Diff(want, summarize(re.LockOrder("").Edges)); d != "" {
		t.Errorf("edges after the restore and replay (-want +got):\n%s", d)
	}
}

// Whatever a stream writer sends, the graph's bookkeeping stays bounded:
// holds that never end and have no TTL stop at maxOrderHolds, acquisitions
// listing leases nobody acquired at maxOrderPending.
func TestLockOrderHostileBounded(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(time.Second))
	junk := make([]string, 30)
	for i := range junk {
		junk[i] = fmt.Sprintf("%016x", i)
	}
	evs := make([]event.Event, 0, 4096)
	for i := range maxOrderHolds + 5000 {
		e := ev(event.Acquired, fmt.Sprint("k:", i), "svc", fmt.Sprint("L", i), time.Second)
		e.Reason = event.JoinLeases(junk)
		evs = append(evs, e)
		if len(evs) == cap(evs) {
			agg.Apply(evs)
			evs = evs[:0]
		}
	}
	agg.Apply(evs)
	agg.order.mu.Lock()
	holds, pending, bytes := len(agg.order.holds), len(agg.order.pending), agg.order.holdBytes
	agg.order.mu.Unlock()
	if holds != maxOrderHolds || pending != maxOrderPending || bytes > maxOrderHoldBytes {
		t.Errorf("holds %d (%d bytes), pending %d; want %d (at most %d bytes) and %d", holds, bytes, pending, maxOrderHolds, maxOrderHoldBytes, maxOrderPending)
	}
	if got := agg.LockOrderHolds(); got != holds {
		t.Errorf("LockOrderHolds() = %d, want the %d holds the graph keeps", got, holds)
	}
}

// Readers (the dashboard, the Prometheus scrape) read the graph while
// events are applied and scanned: run with -race.
func TestLockOrderConcurrentReaders(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(time.Minute))
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				lo := agg.LockOrder("")
				_ = agg.LockOrderInversions()
				for _, in := range lo.Inversions {
					if len(in.Orders) != len(in.Classes) {
						t.Errorf("inversion of %d classes with %d orders", len(in.Classes), len(in.Orders))
					}
				}
			}
		})
	}
	for i := range 200 {
		a, b := fmt.Sprintf("c%d:1", i%7), fmt.Sprintf("c%d:1", (i+1)%7)
		if i%2 == 1 {
			a, b = b, a
		}
		o, in := fmt.Sprint("O", i), fmt.Sprint("I", i)
		agg.Apply([]event.Event{nested(a, "svc", o, time.Second), nested(b, "svc", in, time.Second, o)})
		clk.Add(time.Second) // a scan a second
		agg.Tick()
	}
	close(done)
	wg.Wait()
	if n := agg.LockOrderInversions(); n == 0 {
		t.Error("no inversion among classes taken both ways")
	}
}

// A busy service ends far more holds within orderHoldGrace than the graph
// keeps (some 4 400 acquisitions a second fill it): the ended holds, kept
// only for an acquisition read late, make room for new ones, and a hold
// still held is never pushed out. After such churn an
// inversion is still found, one order under a hold taken before the churn
// and still held, the other under a hold taken after it; the same churn with
// one order only finds one edge and no inversion.
func TestLockOrderUnderChurn(t *testing.T) {
	for _, inverted := range []bool{true, false} {
		t.Run(fmt.Sprintf("inverted=%v", inverted), func(t *testing.T) {
			agg, clk := newTestAggregator(t, Config{})
			s := time.Second
			applyAt(agg, clk, s, nested("order:1", "svc-a", "A1", s)) // held throughout
			churn(agg, clk, s, maxOrderHolds+5000)
			if n := agg.LockOrderHolds(); n > maxOrderHolds {
				t.Fatalf("%d holds after the churn, want at most %d", n, maxOrderHolds)
			}
			second := []event.Event{nested("order:2", "svc-b", "B1", 2*s), nested("inventory:2", "svc-b", "B2", 2*s, "B1")}
			if inverted {
				second = []event.Event{nested("inventory:2", "svc-b", "B1", 2*s), nested("order:2", "svc-b", "B2", 2*s, "B1")}
			}
			applyAt(agg, clk, 2*s, append([]event.Event{nested("inventory:1", "svc-a", "A2", 2*s, "A1")}, second...)...)
			agg.Tick()
			want := []edgeSummary{{"order:*", "inventory:*", 2, []string{"svc-a", "svc-b"}, false, "order:2", "inventory:2", 2 * s, 2 * s}}
			if inverted {
				want = []edgeSummary{
					{"inventory:*", "order:*", 1, []string{"svc-b"}, false, "inventory:2", "order:2", 2 * s, 2 * s},
					{"order:*", "inventory:*", 1, []string{"svc-a"}, false, "order:1", "inventory:1", 2 * s, 2 * s},
				}
			}
			if d := cmp.Diff(want, summarize(agg.LockOrder("").Edges)); d != "" {
				t.Errorf("edges after the churn (-want +got):\n%s", d)
			}
			if n, w := agg.LockOrderInversions(), map[bool]int{true: 1, false: 0}[inverted]; n != w {
				t.Errorf("inversions = %d, want %d", n, w)
			}
		})
	}
}

// churn applies n acquisitions and releases of keys of class churn:* at
// T0+at.
func churn(agg *Aggregator, clk *aggClock, at time.Duration, n int) {
	evs := make([]event.Event, 0, 4096)
	for i := range n {
		key, lease := fmt.Sprint("churn:", i), fmt.Sprint("C", at, i)
		evs = append(evs, nested(key, "svc-c", lease, at), ended(event.Released, key, "svc-c", lease, at, 0, ""))
		if len(evs) == cap(evs) {
			applyAt(agg, clk, at, evs...)
			evs = evs[:0]
		}
	}
	applyAt(agg, clk, at, evs...)
}

// Room stays short while holds end faster than the graph keeps them for
// the grace, and then an acquisition read after its outer hold ended makes
// no edge (the price of keeping new holds). Once they end slowly, a prune
// gives the grace back, and the same late acquisition makes its edge.
func TestLockOrderGraceReturns(t *testing.T) {
	agg, clk := newTestAggregator(t, Config{})
	s := time.Second
	late := func(at time.Duration, n int) { // order:n, ended, then inventory:n under it, read late
		out, in := fmt.Sprint("O", n), fmt.Sprint("I", n)
		applyAt(agg, clk, at, nested(fmt.Sprint("order:", n), "svc-a", out, at), ended(event.Released, fmt.Sprint("order:", n), "svc-a", out, at, 0, ""))
		applyAt(agg, clk, at+s, nested(fmt.Sprint("inventory:", n), "svc-a", in, at+s, out))
	}
	edges := func() int64 {
		var n int64
		for _, e := range agg.LockOrder("").Edges {
			n += e.Count
		}
		return n
	}
	churn(agg, clk, s, maxOrderHolds+5000)
	late(2*s, 1)
	clk.Set(aggT0.Add(12 * s))
	agg.Tick() // 136 000 ended in the last 12 s: the grace would keep 450 000
	if !agg.order.short {
		t.Fatalf("room not short after %d holds ended within a second", maxOrderHolds+5000)
	}
	if n := edges(); n != 0 {
		t.Errorf("%d acquisitions counted while room is short, want the late one to make no edge", n)
	}
	clk.Set(aggT0.Add(23 * s))
	agg.Tick() // two ended in the last 11 s
	if agg.order.short {
		t.Fatalf("room still short after 11 s with two holds ended")
	}
	late(24*s, 2)
	clk.Set(aggT0.Add(34 * s))
	agg.Tick()
	if n := edges(); n != 1 {
		t.Errorf("%d acquisitions counted once the grace is back, want the late one", n)
	}
}

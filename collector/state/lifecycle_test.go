package state

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/lockscope/lockscope/collector/internal/evtest"
	"github.com/lockscope/lockscope/event"
)

func expirations(a *Aggregator, class string) float64 {
	return tallyOf(a).get("expirations", class)
}

func mustLock(t *testing.T, a *Aggregator, key string) KeyDetail {
	t.Helper()
	d, ok := a.Lock(key)
	if !ok {
		t.Fatalf("Lock(%q) not found", key)
	}
	return d
}

func TestExpiryByTick(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	a.Apply([]event.Event{acquired("exp:1", "A", "L1", 0, 0, 1, 2*time.Second)})
	// TTL lapses at 2 s; grace 1 s: not yet at 3 s, expired just after.
	clk.Set(aggT0.Add(3 * time.Second))
	a.Tick()
	if got := expirations(a, "exp:*"); got != 0 {
		t.Fatalf("expirations at ttl+grace = %v, want 0", got)
	}
	if d := mustLock(t, a, "exp:1"); !d.Held {
		t.Errorf("Lock(exp:1).Held at ttl+grace = false, want true")
	}
	clk.Set(aggT0.Add(3*time.Second + time.Millisecond))
	a.Tick()
	a.Tick()
	if got := expirations(a, "exp:*"); got != 1 {
		t.Fatalf("expirations after ttl+grace = %v, want 1", got)
	}
	d := mustLock(t, a, "exp:1")
	if d.Held || d.Owner != "A" || d.Recent[0].Type != event.Expired || d.Recent[0].Reason != "ttl" {
		t.Errorf("Lock(exp:1) = held %v owner %q newest event %+v, want free, last owner A, newest an expired event", d.Held, d.Owner, d.Recent[0])
	}
	// A late keyspace notification confirms, never counts again.
	a.KeyExpired("exp:1")
	if got := expirations(a, "exp:*"); got != 1 {
		t.Errorf("expirations after a late KeyExpired = %v, want 1", got)
	}
	if e := a.Expirations(1); len(e) != 1 || !e[0].Confirmed || e[0].Held != 2*time.Second {
		t.Errorf("Expirations(1) = %+v, want one confirmed, held 2s", e)
	}
	if o := a.Overview(); o.Expirations5m != 1 || o.Held != 0 {
		t.Errorf("Overview() expirations, held = %d, %d, want 1, 0", o.Expirations5m, o.Held)
	}
}

func TestRenewalPreventsExpiry(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	a.Apply([]event.Event{acquired("ren:1", "A", "L1", 0, 0, 1, 2*time.Second)})
	for s := 1; s <= 10; s++ {
		at := time.Duration(s) * time.Second
		clk.Set(aggT0.Add(at))
		a.Apply([]event.Event{renewed("ren:1", "A", "L1", at, 2*time.Second)})
		a.Tick()
	}
	if got := expirations(a, "ren:*"); got != 0 {
		t.Fatalf("expirations with renewals = %v, want 0", got)
	}
	d := mustLock(t, a, "ren:1")
	if !d.Held || !d.ExpiresAt.Equal(aggT0.Add(12*time.Second)) || d.TTL != 2*time.Second {
		t.Errorf("Lock(ren:1) held %v expires %v ttl %v, want held, expiring at 12 s, ttl 2s", d.Held, d.ExpiresAt.Sub(aggT0), d.TTL)
	}
	clk.Set(aggT0.Add(13*time.Second + time.Millisecond))
	a.Tick()
	if got := expirations(a, "ren:*"); got != 1 {
		t.Errorf("expirations after renewals stop = %v, want 1", got)
	}
}

func TestKeyExpiredConfirmsAtOnce(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	a.Apply([]event.Event{acquired("ks:1", "A", "L1", 0, 0, 1, time.Minute)})
	clk.Set(aggT0.Add(time.Second))
	a.KeyExpired("ks:1")
	a.KeyExpired("ks:1")
	a.KeyExpired("ks:unknown")
	clk.Set(aggT0.Add(2 * time.Minute))
	a.Tick()
	a.Apply([]event.Event{ended(event.Expired, "ks:1", "A", "L1", time.Minute, 0, "")})
	if got := expirations(a, "ks:*"); got != 1 {
		t.Fatalf("expirations = %v, want 1 (notification, again, Tick and an expired event are one hold)", got)
	}
	e := a.Expirations(10)
	if len(e) != 1 || !e[0].Confirmed || !e[0].At.Equal(aggT0.Add(time.Second)) {
		t.Errorf("Expirations() = %+v, want one confirmed at 1 s", e)
	}
}

// TestExpiredThenTakenOver is the ownership-flapping case: A's TTL lapses,
// B (waiting) takes the lock before the grace passes and B's acquisition
// arrives before any detection. A's hold still counts as expired, once.
func TestExpiredThenTakenOver(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	ms := time.Millisecond
	clk.Set(aggT0.Add(1100 * ms))
	a.Apply([]event.Event{
		acquired("flap:1", "A", "L1", 0, 0, 1, time.Second),
		acquired("flap:1", "B", "L2", 1050*ms, 900*ms, 5, 10*time.Second),
	})
	a.Tick()
	if got := expirations(a, "flap:*"); got != 0 {
		t.Fatalf("expirations within the grace = %v, want 0 (A may still release)", got)
	}
	clk.Set(aggT0.Add(2100 * ms))
	a.Tick()
	if got := expirations(a, "flap:*"); got != 1 {
		t.Fatalf("expirations after the grace = %v, want 1", got)
	}
	// A's renewal loop notices later: no second count.
	clk.Set(aggT0.Add(3 * time.Second))
	a.Apply([]event.Event{ended(event.Lost, "flap:1", "A", "L1", 2500*ms, 2500*ms, event.ReasonNotOwner)})
	a.Tick()
	if got := expirations(a, "flap:*"); got != 1 {
		t.Errorf("expirations after A's lost event = %v, want 1", got)
	}
	if e := a.Expirations(5); len(e) != 1 || e[0].Owner != "A" || e[0].Held != time.Second {
		t.Errorf("Expirations() = %+v, want A's hold of 1s", e)
	}
	if d := mustLock(t, a, "flap:1"); !d.Held || d.Owner != "B" {
		t.Errorf("Lock(flap:1) held %v by %q, want held by B", d.Held, d.Owner)
	}
	if got := tallyOf(a).get("handoffs", "flap:*"); got != 1 {
		t.Errorf("handoffs = %v, want 1", got)
	}
}

// TestReorderedHandoff: A releases, B acquires, but B's event (another
// emitter) arrives first. Nothing expired.
func TestReorderedHandoff(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	ms := time.Millisecond
	clk.Set(aggT0.Add(2 * time.Second))
	a.Apply([]event.Event{
		acquired("ro:1", "A", "L1", 0, 0, 1, time.Second),
		acquired("ro:1", "B", "L2", 1200*ms, 1100*ms, 3, 10*time.Second), // after A's TTL...
		ended(event.Released, "ro:1", "A", "L1", 900*ms, 900*ms, ""),     // ...but A released in time
	})
	clk.Set(aggT0.Add(5 * time.Second))
	a.Tick()
	if got := expirations(a, "ro:*"); got != 0 {
		t.Errorf("expirations = %v, want 0", got)
	}
	if got := tallyOf(a).get("releases_released", "ro:*"); got != 1 {
		t.Errorf("releases{released} = %v, want 1", got)
	}
	d := mustLock(t, a, "ro:1")
	if !d.Held || d.Owner != "B" || d.Hold.Count != 1 || d.Hold.Sum != 900*ms {
		t.Errorf("Lock(ro:1) held %v by %q, hold distribution %+v, want held by B, one hold of 900ms", d.Held, d.Owner, d.Hold)
	}
}

func TestLostBeforeAndAfterTTL(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(20 * time.Second))
	a.Apply([]event.Event{
		acquired("lost:1", "A", "L1", 0, 0, 1, 10*time.Second),
		ended(event.Lost, "lost:1", "A", "L1", 5*time.Second, 5*time.Second, event.ReasonNotOwner), // before its TTL: taken away
		acquired("lost:2", "A", "L2", 0, 0, 1, 10*time.Second),
		ended(event.Lost, "lost:2", "A", "L2", 12*time.Second, 12*time.Second, ""), // after its TTL: it expired while held
	})
	a.Tick()
	if got := expirations(a, "lost:*"); got != 1 {
		t.Errorf("expirations = %v, want 1 (lost:2 only)", got)
	}
	if e := a.Expirations(5); len(e) != 1 || e[0].Key != "lost:2" || !e[0].At.Equal(aggT0.Add(10*time.Second)) {
		t.Errorf("Expirations() = %+v, want lost:2 at 10 s", e)
	}
	for _, k := range []string{"lost:1", "lost:2"} {
		if d := mustLock(t, a, k); d.Held {
			t.Errorf("Lock(%s).Held = true, want false", k)
		}
	}
}

func TestStuckDetection(t *testing.T) {
	a, clk := newTestAggregator(t, Config{
		StuckAfter: time.Minute,
		StuckRules: []StuckRule{{Pattern: "batch:*", After: 10 * time.Minute}, {Pattern: "b*", After: time.Hour}},
	})
	clk.Set(aggT0.Add(30 * time.Second))
	a.Apply([]event.Event{
		acquired("api:1", "A", "L1", 0, 0, 1, 0), // no TTL: never expires
		acquired("batch:1", "B", "L2", 0, 0, 1, 0),
		acquired("api:2", "C", "L3", 30*time.Second, 0, 1, 0),
	})
	clk.Set(aggT0.Add(61 * time.Second))
	a.Tick()
	stuck := a.Stuck()
	if len(stuck) != 1 || stuck[0].Key != "api:1" || !stuck[0].Stuck || stuck[0].StuckAfter != time.Minute || stuck[0].StuckRule != "" {
		t.Errorf("Stuck() at 61 s = %+v, want api:1 only, past the default 1m (batch:* allows 10 m)", stuck)
	}
	// The first rule matching the class sets its threshold, and says so.
	if l := mustLock(t, a, "batch:1"); l.Stuck || l.StuckAfter != 10*time.Minute || l.StuckRule != "batch:*" {
		t.Errorf("Lock(batch:1) stuck, after, rule = %v, %v, %q, want false, 10m0s, \"batch:*\"", l.Stuck, l.StuckAfter, l.StuckRule)
	}
	clk.Set(aggT0.Add(11 * time.Minute))
	a.Tick()
	var keys []string
	for _, l := range a.Stuck() {
		keys = append(keys, l.Key)
	}
	if diff := cmp.Diff([]string{"api:1", "batch:1", "api:2"}, keys); diff != "" {
		t.Errorf("Stuck() at 11 m, longest held first (-want +got):\n%s", diff)
	}
	// The gauges of the Prometheus export (lockscope_stuck_locks,
	// lockscope_oldest_hold_start_timestamp_seconds).
	var gauges []string
	for _, g := range a.ClassGauges() {
		gauges = append(gauges, fmt.Sprintf("%s stuck %d after %v oldest %s", g.Class, g.Stuck, g.StuckAfter, fmtFloat(float64(g.OldestHold.UnixNano())/1e9)))
	}
	t0 := fmtFloat(float64(aggT0.Unix()))
	if diff := cmp.Diff([]string{"api:* stuck 2 after 1m0s oldest " + t0, "batch:* stuck 1 after 10m0s oldest " + t0}, gauges); diff != "" {
		t.Errorf("ClassGauges() (-want +got):\n%s", diff)
	}
	if o := a.Overview(); o.Stuck != 3 || o.Held != 3 {
		t.Errorf("Overview() stuck, held = %d, %d, want 3, 3", o.Stuck, o.Held)
	}
	// Releasing ends stuckness at once in queries and at the next Tick in metrics.
	a.Apply([]event.Event{ended(event.Released, "api:1", "A", "L1", 11*time.Minute, 0, "")})
	if got := len(a.Stuck()); got != 2 {
		t.Errorf("len(Stuck()) after a release = %d, want 2", got)
	}
}

// TestEventClockDuringBacklog: a collector replaying old events must not
// declare holds expired that later events renew.
func TestEventClockDuringBacklog(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(time.Hour)) // the collector is an hour behind the events it reads
	a.Apply([]event.Event{acquired("bl:1", "A", "L1", 0, 0, 1, 3*time.Second)})
	for s := 1; s <= 20; s++ {
		clk.Add(100 * time.Millisecond) // replay runs fast
		a.Tick()
		a.Apply([]event.Event{renewed("bl:1", "A", "L1", time.Duration(s)*time.Second, 3*time.Second)})
	}
	a.Tick()
	if got := expirations(a, "bl:*"); got != 0 {
		t.Errorf("expirations while replaying a backlog = %v, want 0", got)
	}
	clk.Add(5 * time.Second) // caught up, then silence: the event clock runs on
	a.Tick()
	if got := expirations(a, "bl:*"); got != 1 {
		t.Errorf("expirations after renewals stop = %v, want 1", got)
	}
}

func TestNotOwnerAndForced(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(10 * time.Second))
	f := ended(event.Forced, "f:1", "A", "L1", 5*time.Second, 0, "deadlock")
	f.By = "alice"
	a.Apply([]event.Event{
		acquired("f:1", "A", "L1", 0, 0, 1, time.Minute),
		f,
		ended(event.Released, "f:1", "A", "L1", 6*time.Second, 6*time.Second, event.ReasonNotOwner),
	})
	d := mustLock(t, a, "f:1")
	if d.Held || d.Hold.Count != 1 || d.Hold.Sum != 5*time.Second {
		t.Errorf("Lock(f:1) held %v, hold %+v, want free with one 5s hold (the not_owner release adds none)", d.Held, d.Hold)
	}
	if got := tallyOf(a).get("releases_"+event.ReasonNotOwner, "f:*"); got != 1 {
		t.Errorf("releases{not_owner} = %v, want 1", got)
	}
	fr := a.ForcedReleases(0)
	if len(fr) != 1 || fr[0].Held != 5*time.Second || fr[0].By != "alice" || fr[0].Reason != "deadlock" {
		t.Errorf("ForcedReleases(0) = %+v, want one by alice held 5s", fr)
	}
	clk.Set(aggT0.Add(2 * time.Minute))
	a.Tick()
	if got := expirations(a, "f:*"); got != 0 {
		t.Errorf("expirations of a forced-released hold = %v, want 0", got)
	}
}

func TestHandoffs(t *testing.T) {
	a, _ := newTestAggregator(t, Config{})
	var evs []event.Event
	owners := []string{"A", "A", "B", "A", "A", "C"} // handoffs: A->B, B->A, A->C
	for i, o := range owners {
		at := time.Duration(i) * time.Second
		lease := fmt.Sprint("L", i)
		evs = append(evs, acquired("h:1", o, lease, at, 0, 1, time.Minute), ended(event.Released, "h:1", o, lease, at+time.Millisecond, time.Millisecond, ""))
	}
	a.Apply(evs)
	if got := tallyOf(a).get("handoffs", "h:*"); got != 3 {
		t.Errorf("handoffs = %v, want 3", got)
	}
}

func TestLockDetailAndQueries(t *testing.T) {
	a, clk := newTestAggregator(t, Config{RecentEvents: 4})
	ms := time.Millisecond
	clk.Set(aggT0.Add(5 * time.Second))
	fenced := acquired("d:1", "A", "L9", 3*time.Second, 700*ms, 4, 30*time.Second)
	fenced.Fence = 42
	fenced.Degraded = true
	a.Apply([]event.Event{
		acquired("d:1", "A", "L1", 0, 2*ms, 1, 30*time.Second),
		ended(event.Released, "d:1", "A", "L1", time.Second, time.Second, ""),
		failed("d:1", "B", 1100*ms, 20*ms, 1, event.ReasonHeld),
		acquired("d:1", "B", "L2", 1200*ms, 60*ms, 2, 30*time.Second),
		ended(event.Released, "d:1", "B", "L2", 2*time.Second, 800*ms, ""),
		fenced,
		acquired("e:1", "Z", "L3", 0, 0, 1, 0),
	})
	d := mustLock(t, a, "d:1")
	wantInfo := LockInfo{
		Key: "d:1", Class: "d:*", Held: true, Owner: "A", Lease: "L9", Since: aggT0.Add(3 * time.Second),
		TTL: 30 * time.Second, ExpiresAt: aggT0.Add(33 * time.Second), Fence: 42, Degraded: true, StuckAfter: DefaultStuckAfter,
		Acquisitions: 3, Contentions: 3, Failures: 1, WaitTotal: 782 * ms, HoldTotal: 1800 * ms,
		LastEvent: aggT0.Add(3 * time.Second),
	}
	if diff := cmp.Diff(wantInfo, d.LockInfo); diff != "" {
		t.Errorf("Lock(d:1) info (-want +got):\n%s", diff)
	}
	var types []string
	for _, e := range d.Recent {
		types = append(types, e.Type.String()+"/"+e.Owner)
		if e.Key != "d:1" {
			t.Errorf("recent event key = %q, want d:1", e.Key)
		}
	}
	if diff := cmp.Diff([]string{"acquired/A", "released/B", "acquired/B", "failed/B"}, types); diff != "" {
		t.Errorf("Lock(d:1).Recent newest first, ring of 4 (-want +got):\n%s", diff)
	}
	if d.Recent[0].Fence != 42 || d.Recent[0].Wait != 700*ms || d.Recent[0].TTL != 30*time.Second || d.Recent[0].Attempts != 4 {
		t.Errorf("Lock(d:1).Recent[0] = %+v, want fence 42, wait 700ms, ttl 30s, 4 attempts", d.Recent[0])
	}
	// Waits: 2ms, 20ms, 60ms, 700ms -> buckets <=5ms, <=50ms, <=100ms, <=1s.
	wantWait := []int64{0, 1, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0}
	if diff := cmp.Diff(wantWait, d.Wait.Counts); diff != "" || d.Wait.Count != 4 || len(d.Wait.Bounds) != 12 {
		t.Errorf("Lock(d:1).Wait = %+v (-want +got counts):\n%s", d.Wait, diff)
	}
	if n := len(d.AcquireSeries); n != keySeriesLen || d.AcquireSeries[n-1] != 0.3 {
		t.Errorf("Lock(d:1).AcquireSeries = %v, want %d points ending at 0.3/s", d.AcquireSeries, keySeriesLen)
	}

	page := a.Locks(LockQuery{})
	if page.Total != 2 || len(page.Locks) != 2 || page.Locks[0].Key != "d:1" {
		t.Errorf("Locks({}) = %d of %d, first %q, want d:1 (most contended) first of 2", len(page.Locks), page.Total, page.Locks[0].Key)
	}
	if p := a.Locks(LockQuery{Search: "Z"}); p.Total != 1 || p.Locks[0].Key != "e:1" {
		t.Errorf("Locks(search owner Z) = %+v, want e:1", p)
	}
	if p := a.Locks(LockQuery{Class: "e:*", HeldOnly: true}); p.Total != 1 {
		t.Errorf("Locks(class e:*, held) total = %d, want 1", p.Total)
	}
	if _, ok := a.Lock("missing"); ok {
		t.Errorf("Lock(missing) ok = true, want false")
	}
	if got := a.Classes(); fmt.Sprint(got) != "[d:* e:*]" {
		t.Errorf("Classes() = %v, want [d:* e:*]", got)
	}
	o := a.Overview()
	if o.EventsTotal != 7 || o.Held != 2 || o.TrackedKeys != 2 || o.Failures5m != 1 || len(o.AcquireSeries) != overviewSeriesLen ||
		o.SeriesStep != seriesStep || o.AcquireSeries[overviewSeriesLen-1] != 0.4 {
		t.Errorf("Overview() = %+v", o)
	}
	// 4 acquisitions + 1 refused try; 3 contentions (2 with retries + 1 refused).
	// Waits 2, 20, 60 and 700 ms: the p99 is in (500 ms, 1 s], but no wait
	// was longer than 700 ms. Holds 800 ms and 1 s: 99 % of the way
	// through (500 ms, 1 s].
	if o.ContentionRatio != 3.0/5 || o.WaitP99 != 700*ms || o.WaitMax != 700*ms || o.HoldP99 != 995*ms || o.HoldMax != time.Second {
		t.Errorf("Overview() contention ratio %v, wait p99 %v max %v, hold p99 %v max %v, want 0.6, 700ms, 700ms, 995ms, 1s",
			o.ContentionRatio, o.WaitP99, o.WaitMax, o.HoldP99, o.HoldMax)
	}
	if o.Failures5m != 1 || o.Refused5m != 1 {
		t.Errorf("Overview() failures, refused = %d, %d, want 1, 1", o.Failures5m, o.Refused5m)
	}
	if want := 4 / 55.0; o.AcquireRate < want-1e-9 || o.AcquireRate > want+1e-9 {
		t.Errorf("Overview().AcquireRate = %v, want %v (4 over the 55 s covered)", o.AcquireRate, want)
	}
}

func TestLocksPaging(t *testing.T) {
	a, _ := newTestAggregator(t, Config{})
	var evs []event.Event
	for i := range 120 {
		key := fmt.Sprintf("p:%03d", i)
		evs = append(evs, evtest.Contend(key, i%7, time.Duration(i)*time.Millisecond, 0)...)
		evs = append(evs, acquired(key, "o", "l", 0, time.Duration(i)*time.Millisecond, 1, time.Minute))
	}
	a.Apply(evs)
	var all []string
	for off := 0; ; off += 25 {
		p := a.Locks(LockQuery{Sort: SortKey, Offset: off, Limit: 25})
		if p.Total != 120 {
			t.Fatalf("Locks(offset %d).Total = %d, want 120", off, p.Total)
		}
		if len(p.Locks) == 0 {
			break
		}
		for _, l := range p.Locks {
			all = append(all, l.Key)
		}
	}
	if len(all) != 120 || all[0] != "p:000" || all[119] != "p:119" {
		t.Errorf("paging by key gave %d keys from %q to %q, want 120 from p:000 to p:119", len(all), all[0], all[len(all)-1])
	}
	desc := a.Locks(LockQuery{Sort: SortWait, Limit: 3})
	asc := a.Locks(LockQuery{Sort: SortWait, Limit: 3, Asc: true})
	// Total wait of p:i is (i%7 + 1) * i ms: largest for p:118, smallest p:000.
	if desc.Locks[0].Key != "p:118" || asc.Locks[0].Key != "p:000" {
		t.Errorf("Locks(sort wait) first = %q desc, %q asc, want p:118, p:000", desc.Locks[0].Key, asc.Locks[0].Key)
	}
	// Most contended: i%7 == 6, ties broken by key.
	top := a.Locks(LockQuery{Limit: 2})
	if top.Locks[0].Key != "p:006" || top.Locks[1].Key != "p:013" {
		t.Errorf("Locks(default) first two = %q, %q, want p:006, p:013", top.Locks[0].Key, top.Locks[1].Key)
	}
	if p := a.Locks(LockQuery{Limit: 10_000}); len(p.Locks) != 120 {
		t.Errorf("Locks(limit 10000) = %d locks, want all 120 (limit capped at 500)", len(p.Locks))
	}
}

// TestEvictionBoundsKeys streams 500 000 distinct keys through and checks
// that tracked keys stay within MaxKeys and the heap stays within a fixed
// bound: the 300 000 keys after the first 200 000 may add at most 8 MB, 28
// bytes a key, where a kept key costs some 650 (1 M keys took four minutes
// of the suite under -race on 2 vCPU, for no sharper a bound).
func TestEvictionBoundsKeys(t *testing.T) {
	const maxKeys = 20_000
	a, clk := newTestAggregator(t, Config{MaxKeys: maxKeys})
	// A key held and renewed all along must survive eviction.
	a.Apply([]event.Event{acquired("keep:1", "A", "L", 0, 0, 1, time.Minute)})
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	batch := make([]event.Event, 1000)
	// Keys live in one arena overwritten by every batch, as decoded events
	// share the stream entry's memory: the aggregator must clone what it
	// keeps (a stale alias would show up as corrupted keys below).
	arena := make([]byte, 0, 64*len(batch))
	stream := func(from, to int) {
		for i := from; i < to; i += len(batch) {
			arena = arena[:0]
			for j := range batch {
				n := i + j
				start := len(arena)
				arena = append(arena, "tenant-"...)
				arena = strconv.AppendInt(arena, int64(n%500), 10)
				arena = append(arena, ":job:"...)
				arena = strconv.AppendInt(arena, int64(n), 10)
				key := unsafe.String(&arena[start], len(arena)-start)
				switch {
				case n%64 == 0:
					// Held without a TTL, never released: only eviction
					// of held keys bounds these.
					batch[j] = acquired(key, "owner", "lease", 0, time.Millisecond, 1+n%3, 0)
				case n%2 == 0:
					batch[j] = acquired(key, "owner", "lease", 0, time.Millisecond, 1+n%3, 30*time.Second)
				default:
					batch[j] = failed(key, "owner", 0, time.Millisecond, 1, event.ReasonHeld)
				}
				batch[j].TS = clk.Now().UnixNano()
			}
			a.Apply(batch)
			a.Apply([]event.Event{renewed("keep:1", "A", "L", clk.Now().Sub(aggT0), time.Minute)})
			clk.Add(20 * time.Second) // the first 200k keys already fill an hour of hot-key buckets
			if i%(10*len(batch)) == 0 {
				a.Tick()
			}
		}
	}
	before := heap()
	stream(0, 200_000)
	mid := heap()
	stream(200_000, 500_000)
	after := heap()
	// 500 000 distinct keys fill every shard: the count is exact.
	counted := 0
	for i := range a.keys.shards {
		counted += a.keys.shards[i].count
	}
	if n := a.tracked.Load(); n != maxKeys || counted != maxKeys {
		t.Errorf("tracked keys = %d (%d in the shards), want %d", n, counted, maxKeys)
	}
	if _, ok := a.Lock("keep:1"); !ok {
		t.Errorf("held key keep:1 was evicted")
	}
	for _, l := range a.Locks(LockQuery{Limit: maxPageSize}).Locks {
		if l.Key != "keep:1" && !strings.HasPrefix(l.Key, "tenant-") {
			t.Fatalf("tracked key %q: not a key that was applied (aliased memory?)", l.Key)
		}
		if d, ok := a.Lock(l.Key); ok && d.Key != l.Key {
			t.Fatalf("Lock(%q).Key = %q", l.Key, d.Key)
		}
	}
	if got := len(a.Classes()); got > DefaultMaxClasses+1 {
		t.Errorf("classes = %d, want at most %d", got, DefaultMaxClasses+1)
	}
	growth := int64(after) - int64(mid)
	t.Logf("heap: before %d MB, after 200k keys %d MB, after 500k keys %d MB", before>>20, mid>>20, after>>20)
	if growth > 8<<20 {
		t.Errorf("heap grew %d MB between 200k and 500k distinct keys, want under 8 MB (bounded state)", growth>>20)
	}
	if total := int64(after) - int64(before); total > 64<<20 {
		t.Errorf("heap grew %d MB for %d tracked keys and full hot-key sketches, want under 64 MB", total>>20, maxKeys)
	}
}

// TestConcurrentQueries runs ingestion in one goroutine and every query in
// others; run with -race.
func TestConcurrentQueries(t *testing.T) {
	a, clk := newTestAggregator(t, Config{MaxKeys: 2000})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				switch (i + g) % 8 {
				case 0:
					a.Overview()
				case 1:
					a.HotKeys(Windows[i%3], ByWait, 10)
				case 2:
					a.Locks(LockQuery{Search: "1", Sort: SortHold, Limit: 20})
				case 3:
					a.Lock(fmt.Sprintf("c:%d", i%3000))
				case 4:
					a.Stuck()
				case 5:
					a.Expirations(5)
					a.ForcedReleases(5)
				case 6:
					a.Classes()
					a.Health()
				case 7:
					// What the Prometheus export reads at a scrape.
					a.ClassGauges()
					a.DeadlockCycles()
					a.HotTop(5*time.Minute, ByContentions, 10)
				}
			}
		}()
	}
	for i := range 20_000 {
		key := fmt.Sprintf("c:%d", i%3000)
		lease := fmt.Sprint(i)
		at := time.Duration(i) * time.Millisecond
		clk.Set(aggT0.Add(at))
		a.Apply([]event.Event{acquired(key, "o", lease, at, time.Millisecond, 1+i%2, 50*time.Millisecond)})
		if i%3 == 0 {
			a.Apply([]event.Event{ended(event.Released, key, "o", lease, at, time.Millisecond, "")})
		}
		if i%100 == 0 {
			a.Tick()
			a.KeyExpired(key)
		}
	}
	close(stop)
	wg.Wait()
	if o := a.Overview(); o.EventsTotal != 20_000+6667 {
		t.Errorf("EventsTotal = %d, want %d", o.EventsTotal, 20_000+6667)
	}
}

// TestEvictionTakesLeastRecentlyActiveIdleKey: a full shard evicts, for
// each new key, its least recently active idle key, and a held key only
// when none is idle; loading the victims ahead of a chunk (warmVictimsLocked)
// must not change which. Checked against a model of each shard's recency
// order, over one shard and over four, with new keys arriving in chunks of
// up to applyChunk events, as acquire + release pairs and as lone
// acquisitions.
func TestEvictionTakesLeastRecentlyActiveIdleKey(t *testing.T) {
	for _, maxKeys := range []int{1000, 4096} {
		t.Run(fmt.Sprintf("max=%d", maxKeys), func(t *testing.T) {
			a, clk := newTestAggregator(t, Config{MaxKeys: maxKeys})
			clk.Set(aggT0.Add(time.Hour))
			// The model: per shard, keys from least to most recently
			// active, and which of them are held.
			order := make([][]string, len(a.keys.shards))
			held := map[string]bool{}
			shardOf := func(key string) int { return int(a.keys.hash(key) & a.keys.mask) }
			touch := func(key string) {
				s := shardOf(key)
				order[s] = slices.DeleteFunc(order[s], func(k string) bool { return k == key })
				if len(order[s]) == a.keys.shards[s].cap {
					victim := -1
					for i, k := range order[s] {
						if !held[k] {
							victim = i
							break
						}
					}
					if victim < 0 {
						victim = 0 // every key held: the least recently active hold goes
					}
					delete(held, order[s][victim])
					order[s] = slices.Delete(order[s], victim, victim+1)
				}
				order[s] = append(order[s], key)
			}
			at := time.Duration(0)
			var evs []event.Event
			hold := func(key string) {
				at += time.Microsecond
				evs = append(evs, acquired(key, "o", "l:"+key, at, 0, 1, time.Hour))
				touch(key)
				held[key] = true
			}
			cycle := func(key string) {
				hold(key)
				at += time.Microsecond
				evs = append(evs, ended(event.Released, key, "o", "l:"+key, at, time.Microsecond, ""))
				held[key] = false
			}
			apply := func() {
				a.Apply(evs)
				evs = evs[:0]
			}

			for i := range maxKeys { // fill every shard, all idle
				cycle("k" + strconv.Itoa(i))
			}
			apply()
			for i := 0; i < maxKeys/10; i++ { // the first tenth active again
				cycle("k" + strconv.Itoa(i))
			}
			for i := maxKeys / 10; i < maxKeys/10+20; i++ { // then 20 held
				hold("k" + strconv.Itoa(i))
			}
			apply()
			for i := range maxKeys / 4 { // new keys: pairs, then lone acquisitions
				if i%2 == 0 {
					cycle("n" + strconv.Itoa(i))
				} else {
					hold("n" + strconv.Itoa(i))
				}
			}
			apply()
			check := func(when string) {
				t.Helper()
				want := map[string]bool{}
				for _, keys := range order {
					for _, k := range keys {
						want[k] = true
					}
				}
				if n := a.tracked.Load(); n != int64(len(want)) {
					t.Errorf("%s: tracked = %d, want %d", when, n, len(want))
				}
				for _, prefix := range []string{"k", "n", "h"} {
					for i := range maxKeys * 2 {
						k := prefix + strconv.Itoa(i)
						if _, ok := a.Lock(k); ok != want[k] {
							t.Fatalf("%s: Lock(%q) found = %v, want %v (eviction order)", when, k, ok, want[k])
						}
					}
				}
			}
			check("after new keys")

			// Every key held: new keys evict the least recently active holds.
			for i := range maxKeys * 2 {
				hold("h" + strconv.Itoa(i))
			}
			apply()
			check("with every key held")
		})
	}
}

// TestRevivedHoldCountsOnce: a renewal that arrives after the grace, when
// the hold was already declared expired, revives it (the renewal proves the
// lock was held) and the counter keeps its count. The hold then ends, by a
// lost event at its TTL, an expired event, a keyspace notification or a
// release: that is still one hold, with one expiration and one hold time.
// A replica that read the renewal in time counts the one expiration too.
// (Two replicas of TestTwoReplicasAndASIGKILLShowOneTruth disagreed by one
// when a paused holder's renewal reached one of them after the grace.)
func TestRevivedHoldCountsOnce(t *testing.T) {
	ms := time.Millisecond
	holdCount := func(a *Aggregator, class string) uint64 {
		t.Helper()
		return uint64(tallyOf(a).observed("hold", class))
	}
	for _, end := range []struct {
		name string
		ev   func(at time.Duration) event.Event
		keys bool // end by a keyspace notification
	}{
		{name: "lost", ev: func(at time.Duration) event.Event { return ended(event.Lost, "rv:1", "A", "L1", at, 0, "") }},
		{name: "expired", ev: func(at time.Duration) event.Event { return ended(event.Expired, "rv:1", "A", "L1", at, 0, "") }},
		{name: "keyspace", keys: true},
		{name: "released", ev: func(at time.Duration) event.Event { return ended(event.Released, "rv:1", "A", "L1", at, 0, "") }},
	} {
		t.Run(end.name, func(t *testing.T) {
			a, clk := newTestAggregator(t, Config{})
			a.Apply([]event.Event{acquired("rv:1", "A", "L1", 0, 0, 1, time.Second)})
			clk.Set(aggT0.Add(2100 * ms)) // past the TTL and the 1 s grace
			a.Tick()
			if got := expirations(a, "rv:*"); got != 1 {
				t.Fatalf("expirations after the grace = %v, want 1", got)
			}
			// The holder renewed at 500 ms; its event comes late.
			a.Apply([]event.Event{renewed("rv:1", "A", "L1", 500*ms, time.Second)})
			if d := mustLock(t, a, "rv:1"); !d.Held {
				t.Fatalf("Lock(rv:1).Held = false after the late renewal, want revived")
			}
			// Then the hold ends for good.
			if end.keys {
				a.KeyExpired("rv:1")
			} else {
				a.Apply([]event.Event{end.ev(1600 * ms)})
			}
			clk.Set(aggT0.Add(5 * time.Second))
			a.Tick()
			if d := mustLock(t, a, "rv:1"); d.Held {
				t.Errorf("Lock(rv:1).Held = true after its end")
			}
			if got := expirations(a, "rv:*"); got != 1 {
				t.Errorf("expirations = %v, want 1: one hold", got)
			}
			if got := a.Overview().Expirations5m; got != 1 {
				t.Errorf("Overview().Expirations5m = %d, want 1", got)
			}
			if e := a.Expirations(10); len(e) != 1 {
				t.Errorf("Expirations() = %d entries, want 1", len(e))
			}
			if got := holdCount(a, "rv:*"); got != 1 {
				t.Errorf("hold time observed %d times, want once", got)
			}
			// The key's next hold counts on its own.
			a.Apply([]event.Event{acquired("rv:1", "B", "L2", 5*time.Second, 0, 1, time.Second)})
			clk.Set(aggT0.Add(8 * time.Second))
			a.Tick()
			if got := expirations(a, "rv:*"); got != 2 {
				t.Errorf("expirations after the next hold lapsed = %v, want 2", got)
			}
			if got := holdCount(a, "rv:*"); got != 2 {
				t.Errorf("hold time observed %d times after the next hold, want 2", got)
			}
		})
	}
}

// TestRevivedHoldSupersededCountsOnce: a revived hold that another owner
// takes after its TTL is decided as expired once the grace passes; it was
// counted when first declared expired, so it is not counted again.
func TestRevivedHoldSupersededCountsOnce(t *testing.T) {
	ms := time.Millisecond
	a, clk := newTestAggregator(t, Config{})
	a.Apply([]event.Event{acquired("rs:1", "A", "L1", 0, 0, 1, time.Second)})
	clk.Set(aggT0.Add(2100 * ms))
	a.Tick()
	a.Apply([]event.Event{renewed("rs:1", "A", "L1", 500*ms, time.Second)}) // late: revives
	// B takes the key after the renewed TTL (1.5 s); A's end never comes.
	a.Apply([]event.Event{acquired("rs:1", "B", "L2", 1600*ms, 0, 1, time.Minute)})
	clk.Set(aggT0.Add(5 * time.Second))
	a.Tick()
	if got := expirations(a, "rs:*"); got != 1 {
		t.Errorf("expirations = %v, want 1: A's one hold", got)
	}
	if d := mustLock(t, a, "rs:1"); !d.Held || d.Owner != "B" {
		t.Errorf("Lock(rs:1) held %v by %q, want held by B", d.Held, d.Owner)
	}
	// Without the revival the same superseded hold counts once too.
	b, clkB := newTestAggregator(t, Config{})
	clkB.Set(aggT0.Add(1700 * ms))
	b.Apply([]event.Event{acquired("rs:1", "A", "L1", 0, 0, 1, time.Second), renewed("rs:1", "A", "L1", 500*ms, time.Second),
		acquired("rs:1", "B", "L2", 1600*ms, 0, 1, time.Minute)})
	clkB.Set(aggT0.Add(5 * time.Second))
	b.Tick()
	if got := expirations(b, "rs:*"); got != 1 {
		t.Errorf("expirations with the renewal in time = %v, want 1", got)
	}
}

package workload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/eventrec"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// eventsOn returns the events rec kept on keys starting with prefix, by time.
func eventsOn(rec *eventrec.Recorder, prefix string) []event.Event {
	var out []event.Event
	for _, e := range rec.Events() {
		if strings.HasPrefix(e.Key, prefix) {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b event.Event) int { return int(a.TS - b.TS) })
	return out
}

func count(evs []event.Event, t event.Type, reason string) int {
	n := 0
	for _, e := range evs {
		if e.Type == t && (reason == "" || e.Reason == reason) {
			n++
		}
	}
	return n
}

// simulate runs the scenarios for d at speed and returns the stats, the
// recorder and the key prefix.
func simulate(t *testing.T, opt Options) (Stats, *eventrec.Recorder, string) {
	t.Helper()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	rec := &eventrec.Recorder{}
	opt.KeyPrefix = redistest.KeyPrefix(t)
	opt.Seed = 1
	sim, err := New(rdb, rec, &opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	st := sim.Stats()
	if st.Errors != 0 {
		t.Errorf("Stats().Errors = %d, want 0", st.Errors)
	}
	if got := st.Acquired + st.Refused + st.TimedOut + st.Errors; got != st.Attempts {
		t.Errorf("acquired+refused+timed out+errors = %d, want attempts %d", got, st.Attempts)
	}
	if got := count(eventsOn(rec, opt.KeyPrefix), event.Acquired, ""); int64(got) != st.Acquired {
		t.Errorf("%d acquired events, want Stats().Acquired = %d", got, st.Acquired)
	}
	checkTraces(t, eventsOn(rec, opt.KeyPrefix))
	return st, rec, opt.KeyPrefix
}

// checkTraces checks the simulated work runs inside spans: every event
// carries a trace and a span id, one lease's events (its wait, its hold)
// one trace, and separate requests separate traces: acquisitions share one
// only when made inside another's hold (the deadlock's second lock, whose
// waiting event lists the lease it holds).
func checkTraces(t *testing.T, evs []event.Event) {
	t.Helper()
	byLease := map[string]event.TraceID{}
	nested := map[string]bool{}
	for _, e := range evs {
		if e.Type == event.Waiting && len(e.HeldLeases()) > 0 {
			nested[e.Lease] = true
		}
	}
	traces := map[event.TraceID]bool{}
	requests := 0
	for _, e := range evs {
		if e.Type == event.FenceRejected {
			continue // the resource's fence guard: it knows the fence, not the writer's span
		}
		if !e.TraceID.IsValid() || !e.SpanID.IsValid() {
			t.Errorf("%v event of %s on %q without a trace (%v) or span (%v)", e.Type, e.Owner, e.Key, e.TraceID, e.SpanID)
			continue
		}
		if e.Type == event.Acquired && !nested[e.Lease] {
			traces[e.TraceID] = true
			requests++
		}
		if e.Lease == "" {
			continue
		}
		if tr, ok := byLease[e.Lease]; ok && tr != e.TraceID {
			t.Errorf("%v event of lease %s in trace %v, its earlier events in %v", e.Type, e.Lease, e.TraceID, tr)
		}
		byLease[e.Lease] = e.TraceID
	}
	if len(traces) != requests {
		t.Errorf("%d traces among %d acquisitions of separate requests, want one each", len(traces), requests)
	}
}

func TestCronRunsOnceEachTick(t *testing.T) {
	t.Parallel()
	st, rec, prefix := simulate(t, Options{Scenarios: []string{Cron}, Speed: 20, Duration: 1500 * time.Millisecond})
	if st.CronTicks < 4 || st.CronRuns != st.CronTicks || st.CronDoubleRuns != 0 {
		t.Errorf("cron ticks %d, runs %d, double runs %d; want >= 4 ticks, one run each, no double run", st.CronTicks, st.CronRuns, st.CronDoubleRuns)
	}
	evs := eventsOn(rec, prefix+"cron:nightly-report")
	// Strictly alternating acquired/released: one runner at a time, and
	// every other replica refused while it ran.
	var seq []string
	for _, e := range evs {
		if e.Type == event.Acquired || e.Type == event.Released {
			seq = append(seq, e.Type.String())
		}
	}
	for i, s := range seq {
		if want := []string{"acquired", "released"}[i%2]; s != want {
			t.Fatalf("cron event %d is %s, want %s: %v", i, s, want, seq)
		}
	}
	if got := count(evs, event.Acquired, ""); int64(got) != st.CronRuns {
		t.Errorf("%d cron acquisitions, want one per run (%d)", got, st.CronRuns)
	}
	refused := count(evs, event.Failed, event.ReasonHeld)
	if int64(refused) != st.Refused || refused < 4*int(st.CronRuns-1) || refused > 4*int(st.CronRuns) {
		t.Errorf("%d refused tries (stats %d), want 4 per run for %d runs", refused, st.Refused, st.CronRuns)
	}
	owners := map[string]bool{}
	for _, e := range evs {
		owners[e.Owner] = true
	}
	if len(owners) != 5 {
		t.Errorf("cron events come from %d owners, want the 5 replicas: %v", len(owners), owners)
	}
}

func TestPaymentsDoubleClickIsRefused(t *testing.T) {
	t.Parallel()
	st, rec, prefix := simulate(t, Options{Scenarios: []string{Payments}, Rate: 100, Duration: time.Second})
	if st.Payments < 20 || st.DoubleCharges != 0 {
		t.Errorf("payments %d, double charges %d; want >= 20 and none", st.Payments, st.DoubleCharges)
	}
	evs := eventsOn(rec, prefix+"payment:ord-")
	per := map[string][2]int{}
	for _, e := range evs {
		c := per[e.Key]
		switch {
		case e.Type == event.Acquired:
			c[0]++
		case e.Type == event.Failed && e.Reason == event.ReasonHeld:
			c[1]++
		}
		per[e.Key] = c
	}
	complete := 0
	for k, c := range per {
		if c[0] > 1 {
			t.Errorf("%s acquired %d times, want once", k, c[0])
		}
		if c == [2]int{1, 1} {
			complete++
		}
	}
	// Submits cut short when Run ended may lack their second click.
	if complete < int(st.Payments)-8 {
		t.Errorf("%d orders with one charge and one refused click, want about %d", complete, st.Payments)
	}
}

func TestInventoryHotKeyContention(t *testing.T) {
	t.Parallel()
	st, rec, prefix := simulate(t, Options{Scenarios: []string{Inventory}, Rate: 300, Concurrency: 8, Duration: time.Second})
	if st.Acquired < 100 {
		t.Errorf("inventory acquired %d locks in 1s at 300/s, want >= 100", st.Acquired)
	}
	evs := eventsOn(rec, prefix+"inventory:sku-")
	waited := 0
	for _, e := range evs {
		if e.Type == event.Acquired && e.Key == prefix+"inventory:sku-1" && e.Attempts > 1 {
			waited++
		}
	}
	if waited == 0 {
		t.Error("no acquisition of the hot sku-1 needed more than one attempt, want contention")
	}
	if got := count(evs, event.Released, ""); int64(got) != st.Released {
		t.Errorf("%d released events, want Stats().Released = %d", got, st.Released)
	}
}

func TestWorkflowSessionsRenew(t *testing.T) {
	t.Parallel()
	st, rec, prefix := simulate(t, Options{Scenarios: []string{Workflow}, Speed: 20, Duration: 2 * time.Second})
	evs := eventsOn(rec, prefix+"workflow:")
	if st.Sessions < 2 || count(evs, event.Renewed, "") < 3 {
		t.Errorf("%d sessions, %d renewals; want >= 2 sessions kept alive by renewals", st.Sessions, count(evs, event.Renewed, ""))
	}
	for _, e := range evs {
		if !strings.HasPrefix(e.Owner, "workflow-editor/") {
			t.Errorf("workflow event owner %q, want workflow-editor/<user>", e.Owner)
		}
	}
	// Every session ends released when Run stops.
	if got := count(evs, event.Released, ""); int64(got) != st.Sessions {
		t.Errorf("%d releases, want one per session (%d)", got, st.Sessions)
	}
}

func TestStuckHolderKeepsRenewing(t *testing.T) {
	t.Parallel()
	st, rec, prefix := simulate(t, Options{Scenarios: []string{Stuck}, Speed: 20, Duration: 1500 * time.Millisecond})
	all := eventsOn(rec, prefix+"export:tenant-")
	var evs []event.Event // the hung holder's
	for _, e := range all {
		if e.Owner == "export-worker/pod-2" {
			evs = append(evs, e)
		}
	}
	if st.Hangs != 1 || count(evs, event.Acquired, "") != 1 {
		t.Fatalf("%d hangs, %d acquisitions; want exactly one hung holder", st.Hangs, count(evs, event.Acquired, ""))
	}
	// TTL 500ms at speed 20, renewed every ~167ms for ~1.4s.
	if n := count(evs, event.Renewed, ""); n < 5 {
		t.Errorf("%d renewals of the hung holder, want >= 5", n)
	}
	last := evs[len(evs)-1]
	if last.Type != event.Released || last.Hold < time.Second {
		t.Errorf("last event %v after %v, want released after a hold of >= 1s", last.Type, last.Hold)
	}
	// Other export pods queue behind it: each reports its wait once, naming
	// the hung holder, and none gets the lock while it hangs.
	waiters := map[string]bool{}
	for _, e := range all {
		if e.Type == event.Waiting {
			if e.Holder != "export-worker/pod-2" || e.Key != evs[0].Key || e.Wait <= 0 {
				t.Errorf("waiting event %+v, want one on %s behind export-worker/pod-2 with a deadline", e, evs[0].Key)
			}
			waiters[e.Owner] = true
		}
		if e.Type == event.Acquired && e.Owner != "export-worker/pod-2" && e.TS < last.TS {
			t.Errorf("%s acquired %s while the hung holder held it", e.Owner, e.Key)
		}
	}
	// Waiters join 150ms after the hang began, then every 500ms (speed 20).
	if len(waiters) < 2 {
		t.Errorf("%d export pods queued behind the hung holder, want >= 2", len(waiters))
	}
}

// With HangUntilReleased the hung holder outlasts the 90 s watchdog (4.5 s
// at speed 20) and ends only when its lock is force-released; the queue
// behind it then gets the lock.
func TestStuckHolderHangsUntilReleased(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	rec := &eventrec.Recorder{}
	prefix := redistest.KeyPrefix(t)
	// 10 s: past the watchdog of a hold that began late on a loaded host,
	// with time left for the queue to take the lock once it is forced.
	sim, err := New(rdb, rec, &Options{Scenarios: []string{Stuck}, Speed: 20, KeyPrefix: prefix, Seed: 1, HangUntilReleased: true, Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sim.Run(context.Background()) }()
	var key string
	var since time.Time
	redistest.WaitFor(t, 30*time.Second, "the hung holder", func() bool {
		for _, e := range eventsOn(rec, prefix+"export:tenant-") {
			if e.Type == event.Acquired && e.Owner == "export-worker/pod-2" {
				key, since = e.Key, time.Unix(0, e.TS)
			}
		}
		return key != ""
	})
	// Past the watchdog (4.5 s), counted from the hold, with a second to spare.
	redistest.Sleep(context.Background(), time.Until(since.Add(5500*time.Millisecond)))
	for _, e := range eventsOn(rec, prefix+"export:tenant-") {
		if e.Type == event.Released && e.Owner == "export-worker/pod-2" {
			t.Fatalf("the hung holder released %s by itself, want it stuck until forced", e.Key)
		}
	}
	h, err := lock.New(rdb, nil).Inspect(context.Background(), key)
	if err != nil || h.Owner != "export-worker/pod-2" {
		t.Fatalf("Inspect(%s) = %+v, %v; want the hung holder", key, h, err)
	}
	if _, err := lock.New(rdb, nil).ForceRelease(context.Background(), key, h.Fingerprint, "test", "stuck"); err != nil {
		t.Fatalf("ForceRelease = %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	evs := eventsOn(rec, prefix+"export:tenant-")
	if count(evs, event.Lost, "") != 1 {
		t.Errorf("%d lost events, want the hung holder to notice the forced release once", count(evs, event.Lost, ""))
	}
	took := false
	for _, e := range evs {
		if e.Type == event.Acquired && e.Key == key && e.Owner != "export-worker/pod-2" {
			took = true
		}
	}
	if !took {
		t.Error("no export pod of the queue got the lock after the forced release")
	}
}

func TestCrashedHolderExpires(t *testing.T) {
	t.Parallel()
	st, rec, prefix := simulate(t, Options{Scenarios: []string{Crash}, Speed: 20, Duration: 400 * time.Millisecond})
	evs := eventsOn(rec, prefix+"invoice:batch-")
	if st.Crashes != 1 || st.Abandoned != 1 || len(evs) != 1 || evs[0].Type != event.Acquired {
		t.Fatalf("crashes %d, abandoned %d, events %+v; want one acquisition never released", st.Crashes, st.Abandoned, evs)
	}
	// Nothing in the process reports the expiry: the collector does, from
	// the acquisition's TTL.
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	agg := state.New(state.Config{Now: func() time.Time { return time.Unix(0, now.Load()) }})
	agg.Apply(evs)
	agg.Tick()
	if got := agg.Expirations(10); len(got) != 0 {
		t.Fatalf("Expirations before the TTL = %+v, want none", got)
	}
	now.Add(int64(evs[0].TTL + 2*time.Second))
	agg.Tick()
	got := agg.Expirations(10)
	if len(got) != 1 || got[0].Key != evs[0].Key || got[0].Owner != evs[0].Owner {
		t.Errorf("Expirations after the TTL = %+v, want %s of %s", got, evs[0].Key, evs[0].Owner)
	}
	// And Redis did expire it.
	rdb := redistest.Shared(t).Client(t)
	redistest.WaitFor(t, 30*time.Second, fmt.Sprintf("%s to expire (TTL %v)", evs[0].Key, evs[0].TTL), func() bool {
		return rdb.Exists(context.Background(), evs[0].Key).Val() == 0
	})
}

func TestPausedHolderFindsItsLockLost(t *testing.T) {
	t.Parallel()
	// At speed 2: the pause starts at 2.5 s, TTL 1 s (renewed every third
	// of it: a loaded host keeps it until the freeze), frozen 2.5 s.
	st, rec, prefix := simulate(t, Options{Scenarios: []string{Pause}, Speed: 2, Duration: 8 * time.Second})
	evs := eventsOn(rec, prefix+"ledger:account-")
	if st.Pauses != 1 || st.Lost != 1 {
		t.Fatalf("pauses %d, lost %d; want 1 and 1. Events: %+v", st.Pauses, st.Lost, evs)
	}
	var lost, takeover *event.Event
	for i, e := range evs {
		if e.Type == event.Lost && e.Owner == "ledger-sync/pod-1" {
			lost = &evs[i]
		}
		if e.Type == event.Acquired && e.Owner == "ledger-sync/pod-2" {
			takeover = &evs[i]
		}
	}
	if lost == nil {
		t.Fatalf("no lost event for the paused holder: %+v", evs)
	}
	if takeover == nil || takeover.Key != lost.Key {
		t.Errorf("takeover %+v, want pod-2 acquiring %s", takeover, lost.Key)
	}
	if got := count(evs, event.Released, ""); got != 1 {
		t.Errorf("%d releases, want only pod-2's: the paused holder must not release a lock it lost", got)
	}
}

func TestRunReleasesWhatItHolds(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.KeyPrefix(t)
	sim, err := New(rdb, nil, &Options{Speed: 10, Rate: 100, KeyPrefix: prefix, Duration: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := sim.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A stop that waited out a scenario's pause (25 to 30 s, 2.5 to 3 s at
	// speed 10) would take at least 2.5 s past the duration; how long it
	// took is logged.
	d := time.Since(start)
	t.Logf("Run took %v for a 1.5s duration", d)
	if d >= 1500*time.Millisecond+2500*time.Millisecond {
		t.Errorf("Run took %v for a 1.5s duration, want a prompt stop, not one that waits out a scenario's 2.5s pause", d)
	}
	st := sim.Stats()
	if st.Hangs != 1 || st.Crashes != 1 || st.Sessions == 0 || st.CronRuns == 0 || st.Payments == 0 {
		t.Errorf("stats %+v: want every scenario to have run", st)
	}
	// An obtain cut short by the stop may have succeeded in Redis; the lock
	// library releases such orphans in the background, so allow a moment.
	lc := lock.New(rdb, nil)
	redistest.WaitFor(t, 10*time.Second, "only the crashed batch's locks left", func() error {
		keys, err := rdb.Keys(context.Background(), prefix+"*").Result()
		if err != nil {
			return err
		}
		var left []string
		for _, k := range keys {
			h, err := lc.Inspect(context.Background(), k)
			if errors.Is(err, lock.ErrNotHeld) {
				continue
			}
			if err != nil || !strings.HasPrefix(h.Owner, "billing-batch/") {
				left = append(left, fmt.Sprintf("%s held by %+v (%v)", k, h, err))
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("after Run, locks other than the crashed batch's are still held: %v", left)
		}
		return nil
	})
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	for _, o := range []Options{{Rate: -1}, {Speed: -2}, {Scenarios: []string{"cron", "lunch"}}} {
		if _, err := New(rdb, nil, &o); err == nil {
			t.Errorf("New(%+v) = nil error, want one", o)
		}
	}
}

func TestDeadlockFormsAndResolvesByTimeout(t *testing.T) {
	t.Parallel()
	// At 20x: the first deadlock forms at 0.4s, its waits time out 1s later.
	st, rec, prefix := simulate(t, Options{Scenarios: []string{Deadlock}, Speed: 20, Duration: 2 * time.Second})
	// The first wait to time out breaks it: its Do releases, and the other
	// wait may then succeed before its own deadline.
	if st.Deadlocks != 1 || st.TimedOut < 1 {
		t.Fatalf("deadlocks %d, timed out %d; want one deadlock broken by a timeout", st.Deadlocks, st.TimedOut)
	}
	evs := eventsOn(rec, prefix)
	if n := count(evs, event.Waiting, ""); n != 2 {
		t.Fatalf("%d waiting events, want one per deadlocked wait", n)
	}
	// Replayed up to the moment both wait, the collector sees the cycle.
	var upTo []event.Event
	for _, e := range evs {
		upTo = append(upTo, e)
		if count(upTo, event.Waiting, "") == 2 {
			break
		}
	}
	agg := state.New(state.Config{Now: func() time.Time { return time.Unix(0, upTo[len(upTo)-1].TS) }})
	agg.Apply(upTo)
	cy := agg.Blocking().Cycles
	if len(cy) != 1 || len(cy[0].Members) != 2 {
		t.Fatalf("cycles = %+v, want one of two members", cy)
	}
	owners := []string{cy[0].Members[0].Owner, cy[0].Members[1].Owner}
	// Each service's wait for its second lock is in the trace of the
	// request that holds its first.
	for _, m := range cy[0].Members {
		var held event.TraceID
		for _, e := range upTo {
			if e.Type == event.Acquired && e.Owner == m.Owner {
				held = e.TraceID
			}
		}
		if !m.Trace.IsValid() || m.Trace != held {
			t.Errorf("%s waits in trace %v, holds in %v: want one request, one trace", m.Owner, m.Trace, held)
		}
	}
	slices.Sort(owners)
	if !slices.Equal(owners, []string{"ledger-sync/pod-1", "payments-api/pod-2"}) {
		t.Errorf("cycle owners = %q", owners)
	}
	// And it resolved: both waits ended, nobody waits any more.
	agg2 := state.New(state.Config{Now: func() time.Time { return time.Unix(0, evs[len(evs)-1].TS) }})
	agg2.Apply(evs)
	if n := agg2.Overview().Waiters; n != 0 || len(agg2.Blocking().Cycles) != 0 {
		t.Errorf("after the timeouts: %d waiters, cycles %+v; want none", n, agg2.Blocking().Cycles)
	}
}

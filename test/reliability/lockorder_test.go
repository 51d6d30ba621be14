package reliability

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

func init() { helpers["ordered"] = orderedMain }

// orderedConfig: take First (Do), then Second inside it, release both and
// exit. Nobody waits: the order is taken without contention.
type orderedConfig struct {
	Redis, Owner, First, Second string
}

// orderedMain is one service taking two locks in its order, as its own
// process.
func orderedMain(ctx context.Context, b []byte) (any, error) {
	var cfg orderedConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, err
	}
	opt, err := redis.ParseURL(cfg.Redis)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{FlushInterval: 10 * time.Millisecond})
	c := lock.New(rdb, &lock.Options{Owner: cfg.Owner, Recorder: em})
	err = c.Do(ctx, cfg.First, 10*time.Second, nil, func(ctx context.Context) error {
		l, err := c.Obtain(ctx, cfg.Second, 10*time.Second, nil)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	})
	if cerr := em.Close(context.Background()); err == nil {
		err = cerr
	}
	return map[string]string{"err": errString(err)}, nil
}

// takeInOrder runs one ordered service to its end.
func takeInOrder(t *testing.T, srv *redistest.Server, owner, first, second string) {
	t.Helper()
	p := startHelper(t, "ordered", orderedConfig{Redis: srv.URL(), Owner: owner, First: first, Second: second})
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not finish taking %s then %s within 30s; stderr:\n%s", owner, first, second, p.stderr.String())
	}
	var res map[string]string
	if err := json.Unmarshal(p.stdout.Bytes(), &res); err != nil || !p.cmd.ProcessState.Success() {
		t.Fatalf("%s: %v, result %q (%v); stderr:\n%s", owner, p.cmd.ProcessState, p.stdout.String(), err, p.stderr.String())
	}
	if res["err"] != "" {
		t.Fatalf("%s taking %s then %s: %s", owner, first, second, res["err"])
	}
}

// lockOrderJSON is what the tests read of GET /api/v1/lockorder.
type lockOrderJSON struct {
	Edges []struct {
		From, To  string
		Count     int64
		Owners    []string
		FirstSeen time.Time `json:"first_seen"`
		LastSeen  time.Time `json:"last_seen"`
	}
	Inversions []struct {
		Classes []string
		Owners  []string
		Orders  []struct {
			From, To string
			Count    int64
			Owners   []string
			Example  struct {
				FromKey string `json:"from_key"`
				ToKey   string `json:"to_key"`
			}
		}
		FirstSeen time.Time `json:"first_seen"`
	}
}

func lockOrderOf(p *proc, class string) (lockOrderJSON, bool) {
	var v lockOrderJSON
	u := "/api/v1/lockorder"
	if class != "" {
		u += "?class=" + class
	}
	return v, getJSON(p.url(u), &v)
}

// inversionsGauge reads lockscope_lock_order_inversions; ok is false while
// serve does not export it.
func inversionsGauge(ctx context.Context, t *testing.T, p *proc) (float64, bool) {
	m := p.metrics(ctx, t)
	return m.sum("lockscope_lock_order_inversions"), m["lockscope_lock_order_inversions"] != nil
}

// TestLockOrderInversionWithoutDeadlock: through the real serve, service-a
// takes order:* then inventory:*, and later service-b takes inventory:*
// then order:*, each in its own process, never at the same time: no
// deadlock ever forms, and the inversion is reported (API, gauge,
// /blocking) with both orders, their owners and example keys. invoice:*
// then ledger:*, taken by two services in one order, is one edge and no
// inversion. A replica started later that replays none of the stream has
// both from the shared store, and a restarted one that replays it counts
// none twice.
func TestLockOrderInversionWithoutDeadlock(t *testing.T) {
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := testCtx(t, 2*time.Minute)
	serve := startServe(t, bin, srv.URL(), nil)

	takeInOrder(t, srv, "billing-a", "invoice:1", "ledger:1")
	takeInOrder(t, srv, "billing-b", "invoice:2", "ledger:2")
	takeInOrder(t, srv, "service-a", "order:1", "inventory:1")
	var lo lockOrderJSON
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool {
		var ok bool
		lo, ok = lockOrderOf(serve, "")
		return ok && len(lo.Edges) == 2
	}) {
		t.Fatalf("/api/v1/lockorder = %+v, want the two orders taken so far", lo)
	}
	if len(lo.Inversions) != 0 {
		t.Errorf("inversions with every order taken one way = %+v, want none", lo.Inversions)
	}
	if !redistest.Poll(testCtx(t, 5*time.Second), func() bool { n, ok := inversionsGauge(ctx, t, serve); return ok && n == 0 }) {
		t.Error("lockscope_lock_order_inversions is not 0 while every order is taken one way")
	}

	takeInOrder(t, srv, "service-b", "inventory:2", "order:2")
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool {
		var ok bool
		lo, ok = lockOrderOf(serve, "")
		return ok && len(lo.Inversions) == 1
	}) {
		t.Fatalf("/api/v1/lockorder = %+v, want one inversion once service-b took the reverse order", lo)
	}
	in := lo.Inversions[0]
	if !slices.Equal(in.Classes, []string{"inventory:*", "order:*"}) || !slices.Equal(in.Owners, []string{"service-b", "service-a"}) || len(in.Orders) != 2 {
		t.Fatalf("inversion = %+v, want inventory:* ⇄ order:* by service-b and service-a", in)
	}
	o := in.Orders[1]
	if o.From != "order:*" || o.To != "inventory:*" || o.Count != 1 || !slices.Equal(o.Owners, []string{"service-a"}) ||
		o.Example.FromKey != "order:1" || o.Example.ToKey != "inventory:1" {
		t.Errorf("order:* → inventory:* = %+v, want service-a's once, e.g. order:1 → inventory:1", o)
	}
	if o := in.Orders[0]; o.Example.FromKey != "inventory:2" || o.Example.ToKey != "order:2" || !slices.Equal(o.Owners, []string{"service-b"}) {
		t.Errorf("inventory:* → order:* = %+v, want service-b's, e.g. inventory:2 → order:2", o)
	}
	var healthy []int64
	for _, e := range lo.Edges {
		if e.From == "invoice:*" {
			healthy = append(healthy, e.Count)
			if !slices.Equal(e.Owners, []string{"billing-a", "billing-b"}) {
				t.Errorf("invoice:* → ledger:* owners = %q, want billing-a and billing-b", e.Owners)
			}
		}
	}
	if !slices.Equal(healthy, []int64{2}) {
		t.Errorf("invoice:* → ledger:* edges = %v, want one, counted twice", healthy)
	}
	if ledger, _ := lockOrderOf(serve, "ledger:*"); len(ledger.Edges) != 1 || len(ledger.Inversions) != 0 {
		t.Errorf("/api/v1/lockorder?class=ledger:* = %+v, want its one order and no inversion", ledger)
	}
	if !redistest.Poll(testCtx(t, 5*time.Second), func() bool { n, _ := inversionsGauge(ctx, t, serve); return n == 1 }) {
		n, _ := inversionsGauge(ctx, t, serve)
		t.Errorf("lockscope_lock_order_inversions = %v, want 1", n)
	}
	if page := getText(t, serve.url("/blocking")); strings.Count(page, `data-testid="lock-order-inversion"`) != 1 || !strings.Contains(page, "service-b") {
		t.Errorf("/blocking shows %d inversions, want 1 naming service-b", strings.Count(page, `data-testid="lock-order-inversion"`))
	}

	// A replica started now that replays none of the stream (--backfill
	// -1s: its group starts at the stream's end) has the graph from the
	// shared store alone, counts as they were.
	// The store writes every second.
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool {
		return srv.Client(t).HLen(ctx, collector.LockOrderKey(event.DefaultStream)).Val() == 3
	}) {
		t.Fatalf("the shared lock-order graph holds %d edges, want 3", srv.Client(t).HLen(ctx, collector.LockOrderKey(event.DefaultStream)).Val())
	}
	late := startServe(t, bin, srv.URL(), nil, "--replica", "late-replica", "--backfill", "-1s")
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool {
		var ok bool
		lo, ok = lockOrderOf(late, "")
		return ok && len(lo.Inversions) == 1 && len(lo.Edges) == 3
	}) {
		t.Fatalf("a replica that replayed nothing: /api/v1/lockorder = %+v, want the three orders and the inversion", lo)
	}
	for _, e := range lo.Edges {
		if want := map[string]int64{"invoice:*": 2, "order:*": 1, "inventory:*": 1}[e.From]; e.Count != want {
			t.Errorf("on the late replica %s → %s counted %d, want %d", e.From, e.To, e.Count, want)
		}
	}
	if !redistest.Poll(testCtx(t, 5*time.Second), func() bool { n, _ := inversionsGauge(ctx, t, late); return n == 1 }) {
		t.Error("on the late replica lockscope_lock_order_inversions is not 1")
	}
	late.stop(t, 10*time.Second)

	// A restart that replays the stream too counts none of its acquisitions
	// again.
	serve.stop(t, 10*time.Second)
	serve = startServeOn(t, bin, srv.URL(), serve.listen, nil)
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool {
		var ok bool
		lo, ok = lockOrderOf(serve, "")
		return ok && len(lo.Inversions) == 1 && len(lo.Edges) == 3
	}) {
		t.Fatalf("after a restart with replay: /api/v1/lockorder = %+v", lo)
	}
	for _, e := range lo.Edges {
		if want := map[string]int64{"invoice:*": 2, "order:*": 1, "inventory:*": 1}[e.From]; e.Count != want {
			t.Errorf("after the replay %s → %s counted %d, want %d (none twice)", e.From, e.To, e.Count, want)
		}
	}
}

// TestLockOrderAgesOut: with --lock-order-window 3s, an inversion is
// reported, then, with neither order taken again, drops out of the API and
// the gauge once the older order is 3 s old: a fixed inversion stops
// alerting.
func TestLockOrderAgesOut(t *testing.T) {
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := testCtx(t, time.Minute)
	serve := startServe(t, bin, srv.URL(), nil, "--lock-order-window", "3s")
	takeInOrder(t, srv, "service-a", "order:1", "inventory:1")
	takeInOrder(t, srv, "service-b", "inventory:2", "order:2")
	var lo lockOrderJSON
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool {
		var ok bool
		lo, ok = lockOrderOf(serve, "")
		return ok && len(lo.Inversions) == 1
	}) {
		t.Fatalf("/api/v1/lockorder = %+v, want the inversion", lo)
	}
	reported := time.Now()
	if !redistest.Poll(testCtx(t, 20*time.Second), func() bool {
		var ok bool
		lo, ok = lockOrderOf(serve, "")
		n, _ := inversionsGauge(ctx, t, serve)
		return ok && len(lo.Inversions) == 0 && len(lo.Edges) == 0 && n == 0
	}) {
		t.Fatalf("/api/v1/lockorder = %+v 20 s after a 3 s window, want it empty and the gauge 0", lo)
	}
	t.Logf("the inversion aged out %v after it was reported (window 3s)", time.Since(reported).Round(time.Millisecond))
}

// TestLockOrderInversionListedBeforeItsDeadlock: two services take
// ledger:* then account:* and account:* then ledger:* at different times:
// the inversion is listed. Later the two orders meet and deadlock for real:
// the deadlock shows as it always did (/api/v1/blocking, the gauge), and
// its inversion had been on the list since before it formed.
func TestLockOrderInversionListedBeforeItsDeadlock(t *testing.T) {
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := testCtx(t, time.Minute)
	serve := startServe(t, bin, srv.URL(), nil)
	takeInOrder(t, srv, "service-a", "ledger:7", "account:7")
	takeInOrder(t, srv, "service-b", "account:8", "ledger:8")
	var lo lockOrderJSON
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool {
		var ok bool
		lo, ok = lockOrderOf(serve, "")
		return ok && len(lo.Inversions) == 1
	}) {
		t.Fatalf("/api/v1/lockorder = %+v, want the inversion before any deadlock", lo)
	}
	listed := lo.Inversions[0].FirstSeen
	if !slices.Equal(lo.Inversions[0].Classes, []string{"account:*", "ledger:*"}) {
		t.Errorf("inversion classes = %q, want account:* and ledger:*", lo.Inversions[0].Classes)
	}

	deadlockProcesses(ctx, t, srv, 20*time.Second, 20*time.Second)
	formed := time.Now()
	var b struct {
		Deadlocks [][]struct {
			Owner, Holds string
			WaitsFor     string `json:"waits_for"`
		}
	}
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool {
		return getJSON(serve.url("/api/v1/blocking"), &b) && len(b.Deadlocks) == 1
	}) {
		t.Fatalf("/api/v1/blocking = %+v, want the deadlock", b)
	}
	got := map[string]string{}
	for _, m := range b.Deadlocks[0] {
		got[m.Owner] = m.Holds + " waits " + m.WaitsFor
	}
	if got["service-a"] != "ledger:1 waits account:1" || got["service-b"] != "account:1 waits ledger:1" {
		t.Errorf("deadlock = %v", got)
	}
	if !redistest.Poll(testCtx(t, 5*time.Second), func() bool { return serve.metrics(ctx, t).sum("lockscope_deadlock_cycles") == 1 }) {
		t.Error("lockscope_deadlock_cycles is not 1 during the deadlock")
	}
	if !listed.Before(formed) {
		t.Errorf("the inversion was first seen at %v, not before the deadlock formed (%v)", listed, formed)
	}
	if lo, _ = lockOrderOf(serve, ""); len(lo.Inversions) != 1 || !lo.Inversions[0].FirstSeen.Equal(listed) {
		t.Errorf("during the deadlock /api/v1/lockorder = %+v, want the same inversion, first seen %v", lo, listed)
	}
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

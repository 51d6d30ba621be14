package reliability

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

func init() { helpers["crossed"] = crossedMain }

// crossedConfig: take First (Do), wait for the Go key to exist, then wait
// for Second for at most Wait.
type crossedConfig struct {
	Redis, Owner, First, Second, Go string
	Wait                            time.Duration
}

// crossedMain is one side of a deadlock, as its own process.
func crossedMain(ctx context.Context, b []byte) (any, error) {
	var cfg crossedConfig
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
	defer em.Close(context.Background())
	c := lock.New(rdb, &lock.Options{Owner: cfg.Owner, Recorder: em})
	err = c.Do(ctx, cfg.First, time.Minute, nil, func(ctx context.Context) error {
		for rdb.Exists(ctx, cfg.Go).Val() == 0 {
			if !redistest.Sleep(ctx, 10*time.Millisecond) {
				return ctx.Err()
			}
		}
		wctx, cancel := context.WithTimeout(ctx, cfg.Wait)
		defer cancel()
		_, err := c.Obtain(wctx, cfg.Second, time.Minute, &lock.ObtainOptions{Retry: lock.LinearBackoff(20 * time.Millisecond)})
		return err
	})
	return map[string]string{"err": errString(err)}, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestDeadlockBetweenTwoProcesses: process A holds x and waits for y,
// process B holds y and waits for x (nested Do). The real serve reports one
// cycle in /metrics and /api/v1/blocking (within 2 s on a quiet host: the
// figure is logged). A is then killed: its wait never ends, yet it
// disappears once its deadline has passed, and the cycle with it.
func TestDeadlockBetweenTwoProcesses(t *testing.T) {
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := testCtx(t, time.Minute)
	serve := startServe(t, bin, srv.URL(), nil)

	// A's wait is the window in which the cycle can be seen: 5 s, room for
	// a loaded host.
	const waitA = 5 * time.Second
	a := deadlockProcesses(ctx, t, srv, waitA, 30*time.Second)
	formed := time.Now()
	type blocking struct {
		Waiters   int `json:"waiters"`
		Deadlocks [][]struct {
			Owner    string `json:"owner"`
			Holds    string `json:"holds"`
			WaitsFor string `json:"waits_for"`
		} `json:"deadlocks"`
	}
	get := func() (blocking, float64) {
		var b blocking
		resp, err := http.Get(serve.url("/api/v1/blocking"))
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&b)
			resp.Body.Close()
		}
		return b, serve.metrics(ctx, t).sum("lockscope_deadlock_cycles")
	}
	var b blocking
	var cycles float64
	if !redistest.Poll(testCtx(t, waitA), func() bool { b, cycles = get(); return cycles == 1 && len(b.Deadlocks) == 1 }) {
		t.Fatalf("no cycle while A waited (%v): /metrics says %v cycles, /api/v1/blocking %+v", waitA, cycles, b)
	}
	t.Logf("cycle of two processes in /metrics and /api/v1/blocking %v after it formed", time.Since(formed).Round(time.Millisecond))
	got := map[string]string{}
	for _, m := range b.Deadlocks[0] {
		got[m.Owner] = m.Holds + " waits " + m.WaitsFor
	}
	if got["service-a"] != "ledger:1 waits account:1" || got["service-b"] != "account:1 waits ledger:1" {
		t.Errorf("deadlock = %v", got)
	}

	// A dies while it waits: nobody ends its wait; its deadline does.
	a.cmd.Process.Kill()
	<-a.done
	if !redistest.Poll(testCtx(t, waitA+20*time.Second), func() bool {
		b, cycles = get()
		return cycles == 0 && len(b.Deadlocks) == 0 && b.Waiters == 1
	}) {
		t.Fatalf("the killed waiter is still shown: %v cycles, %+v", cycles, b)
	}
	t.Logf("the killed waiter gone %v after the deadlock formed (its deadline: %v)", time.Since(formed).Round(time.Millisecond), waitA)
}

// TestDeadlockCountedOnceAcrossARestart: a deadlock between two processes
// outlasts serve, which is killed (SIGKILL) and restarted as the same
// replica. The restarted serve shows the deadlock, rebuilt from the stream,
// and does not count it again: lockscope_deadlocks_detected_total restarts
// at zero with the process, and rate() over the restart would otherwise
// report a new deadlock that is not one (at every restart while it lasts).
func TestDeadlockCountedOnceAcrossARestart(t *testing.T) {
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := testCtx(t, time.Minute)
	// Stuck after a second: the stuck gauge, which only a scan sets, tells
	// that the restarted serve has scanned.
	serve := startServe(t, bin, srv.URL(), nil, "--stuck-after", "1s")

	// Killed at the end of the test, still waiting.
	deadlockProcesses(ctx, t, srv, 40*time.Second, 40*time.Second)
	figures := func(p *proc) (cycles, detected float64) {
		m := p.metrics(ctx, t)
		return m.sum("lockscope_deadlock_cycles"), m.sum("lockscope_deadlocks_detected_total")
	}
	if !redistest.Poll(testCtx(t, 20*time.Second), func() bool { c, d := figures(serve); return c == 1 && d == 1 }) {
		c, d := figures(serve)
		t.Fatalf("before the restart: %v cycles, %v detected; want 1 and 1", c, d)
	}
	counted := time.Now()
	// Serve keeps running a while with the deadlock: a scan saw it, and it
	// marks itself alive every 500 ms, which the restarted serve takes as
	// when its predecessor stopped counting, less a scan period (1 s): the
	// mark must come more than that after the deadlock formed.
	rdb := srv.Client(t)
	var mark time.Time
	if !redistest.Poll(testCtx(t, 20*time.Second), func() bool {
		mark = presenceMark(ctx, rdb, "lockscope:events:replica:*")
		return mark.After(counted.Add(1100 * time.Millisecond))
	}) {
		t.Fatalf("serve's presence mark %v, want one more than a second after it counted the deadlock (%v)", mark, counted)
	}
	serve.kill(t)
	serve = startServeOn(t, bin, srv.URL(), serve.listen, nil, "--stuck-after", "1s")
	scanned := func() bool { return serve.metrics(ctx, t).sum("lockscope_stuck_locks") == 2 }
	if !redistest.Poll(testCtx(t, 20*time.Second), func() bool { c, _ := figures(serve); return c == 1 && scanned() }) {
		c, d := figures(serve)
		t.Fatalf("after the restart: %v cycles, %v detected, scanned %v; want the deadlock shown by a scan", c, d, scanned())
	}
	if c, d := figures(serve); c != 1 || d != 0 {
		t.Errorf("after the restarted serve's scan: %v cycles, %v detected; want 1 and 0 (the deadlock was counted before the restart)", c, d)
	}
}

// deadlockProcesses starts two crossed processes on srv and lets them
// deadlock: service-a holds ledger:1 and waits for account:1 at most waitA,
// service-b holds account:1 and waits for ledger:1 at most waitB. It returns
// once both hold their first lock and have been told to go on, with
// service-a's process.
func deadlockProcesses(ctx context.Context, t *testing.T, srv *redistest.Server, waitA, waitB time.Duration) *helperProc {
	t.Helper()
	a := startHelper(t, "crossed", crossedConfig{Redis: srv.URL(), Owner: "service-a", First: "ledger:1", Second: "account:1", Go: "go", Wait: waitA})
	startHelper(t, "crossed", crossedConfig{Redis: srv.URL(), Owner: "service-b", First: "account:1", Second: "ledger:1", Go: "go", Wait: waitB})
	rdb := srv.Client(t)
	if !redistest.Poll(ctx, func() bool { return rdb.Exists(ctx, "ledger:1", "account:1").Val() == 2 }) {
		t.Fatal("the two processes did not take their first locks")
	}
	rdb.Set(ctx, "go", "1", time.Minute)
	return a
}

// presenceMark returns when a replica last marked itself alive in a key
// matching pattern (collector.PresenceKey: "instance|unix ms").
func presenceMark(ctx context.Context, rdb *redis.Client, pattern string) time.Time {
	keys, _ := rdb.Keys(ctx, pattern).Result()
	var last time.Time
	for _, k := range keys {
		_, ms, _ := strings.Cut(rdb.Get(ctx, k).Val(), "|")
		if n, err := strconv.ParseInt(ms, 10, 64); err == nil && time.UnixMilli(n).After(last) {
			last = time.UnixMilli(n)
		}
	}
	return last
}

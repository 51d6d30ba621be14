package reliability

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/internal/redistest"
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
// cycle within 2 s in /metrics and /api/v1/blocking. A is then killed: its
// wait never ends, yet it disappears once its deadline has passed, and the
// cycle with it.
func TestDeadlockBetweenTwoProcesses(t *testing.T) {
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := testCtx(t, time.Minute)
	serve := startServe(t, bin, srv.URL(), nil)

	a := deadlockProcesses(ctx, t, srv, 3*time.Second, 20*time.Second)
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
	deadline := time.Now().Add(2 * time.Second)
	for {
		b, cycles := get()
		if cycles == 1 && len(b.Deadlocks) == 1 {
			t.Logf("cycle of two processes in /metrics and /api/v1/blocking %v after it formed", time.Since(formed).Round(time.Millisecond))
			got := map[string]string{}
			for _, m := range b.Deadlocks[0] {
				got[m.Owner] = m.Holds + " waits " + m.WaitsFor
			}
			if got["service-a"] != "ledger:1 waits account:1" || got["service-b"] != "account:1 waits ledger:1" {
				t.Errorf("deadlock = %v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no cycle within 2s: /metrics says %v cycles, /api/v1/blocking %+v", cycles, b)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A dies while it waits: nobody ends its wait; its 3 s deadline does.
	a.cmd.Process.Kill()
	<-a.done
	deadline = time.Now().Add(8 * time.Second)
	for {
		b, cycles := get()
		if cycles == 0 && len(b.Deadlocks) == 0 && b.Waiters == 1 {
			t.Logf("the killed waiter gone %v after the deadlock formed (its deadline: 3s)", time.Since(formed).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed waiter is still shown: %v cycles, %+v", cycles, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
	serve := startServe(t, bin, srv.URL(), nil)

	// Killed at the end of the test, still waiting.
	deadlockProcesses(ctx, t, srv, 40*time.Second, 40*time.Second)
	figures := func(p *proc) (cycles, detected float64) {
		m := p.metrics(ctx, t)
		return m.sum("lockscope_deadlock_cycles"), m.sum("lockscope_deadlocks_detected_total")
	}
	if !redistest.Poll(testCtx(t, 5*time.Second), func() bool { c, d := figures(serve); return c == 1 && d == 1 }) {
		c, d := figures(serve)
		t.Fatalf("before the restart: %v cycles, %v detected; want 1 and 1", c, d)
	}
	// Serve keeps running a while with the deadlock: its scans (every
	// second) saw it, and it marks itself alive every 500 ms, which the
	// restarted serve takes as when its predecessor stopped counting.
	time.Sleep(3 * time.Second)
	serve.kill(t)
	serve = startServeOn(t, bin, srv.URL(), serve.listen, nil)
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool { c, _ := figures(serve); return c == 1 }) {
		c, d := figures(serve)
		t.Fatalf("after the restart: %v cycles, %v detected; want the deadlock shown", c, d)
	}
	// Three scans of the restarted serve.
	time.Sleep(3 * time.Second)
	if c, d := figures(serve); c != 1 || d != 0 {
		t.Errorf("3 s after the restart: %v cycles, %v detected; want 1 and 0 (the deadlock was counted before the restart)", c, d)
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

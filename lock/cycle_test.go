package lock

import (
	"context"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// allocsChildEnv marks the process TestCycleAllocations runs itself in.
const allocsChildEnv = "LOCKSCOPE_TEST_ALLOCS_CHILD"

// TestCycleAllocations bounds the allocations of an uncontended Obtain +
// Release, events off: the lease (which holds its commands' arguments), its
// value head, the SET's value, the two commands, and what go-redis allocates
// for two round trips (its pool's connection check, the reply). Issue 28:
// the lock path cost 29 allocations a cycle against plain go-redis's 21, and
// where callers send on their own the machine is CPU-bound.
//
// AllocsPerRun counts the whole process's allocations, and goroutines that
// earlier tests leave behind (a client redialling a Redis the test stopped,
// an orphan's release, an emitter) add to it: a CI run counted 157. So the
// test runs itself again in a process of its own, where nothing else runs.
func TestCycleAllocations(t *testing.T) {
	if os.Getenv(allocsChildEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCycleAllocations$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), allocsChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestCycleAllocations") {
			t.Fatalf("the test in a process of its own: %v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "allocations") {
				t.Log(strings.TrimSpace(line))
			}
		}
		return
	}
	c, _, _, p := newClient(t, "allocs")
	c.rec = nil
	ctx := context.Background()
	key := p + "k"
	var err error
	cycle := func() {
		var l *Lease
		if l, err = c.Obtain(ctx, key, time.Second, nil); err == nil {
			err = l.Release(ctx)
		}
	}
	cycle() // connections and the script cache
	if err != nil {
		t.Fatal(err)
	}
	// The cycle's own goroutines (a release's orphan, the pool's reaper)
	// may still run between runs: they only ever add, so the lowest of a
	// few runs is the cycle's own count.
	got := math.Inf(1)
	for range 5 {
		got = min(got, testing.AllocsPerRun(100, cycle))
		if err != nil {
			t.Fatal(err)
		}
	}
	// 5 of the lock package's and 7 of go-redis v9.23's (one more with
	// -race); a little room for go-redis to change.
	const want = 16
	t.Logf("Obtain + Release: %.1f allocations", got)
	if got > want {
		t.Errorf("Obtain + Release: %.1f allocations, want at most %d", got, want)
	}
}

// TestScriptFlushFallsBackToEval checks that the scripts run again as EVAL
// when Redis no longer knows them (a restart, SCRIPT FLUSH), both when the
// caller sends its command on its own and through the batcher's pipelines.
func TestScriptFlushFallsBackToEval(t *testing.T) {
	c, rdb, _, p := newClient(t, "noscript")
	ctx := context.Background()
	// A lone caller without a deadline sends directly.
	l := mustObtain(t, c, p+"direct", 10*time.Second, &ObtainOptions{Fencing: true})
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH = %v, want nil", err)
	}
	if n := rdb.Exists(ctx, p+"direct").Val(); n != 0 {
		t.Fatal("key left after Release")
	}

	// Callers with a deadline, on a client that does not enforce it, wait
	// on their context and go through the pipelines.
	const callers = 16
	leases := make([]*Lease, callers)
	for i := range leases {
		leases[i] = mustObtain(t, c, p+"piped:"+strconv.Itoa(i), 10*time.Second, nil)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, callers)
	for i, l := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if errs[i] = l.Release(dctx); errs[i] != nil {
				return
			}
			// And obtain.lua, which fencing uses.
			f, err := c.Obtain(dctx, p+"fenced:"+strconv.Itoa(i), 10*time.Second, &ObtainOptions{Fencing: true})
			if err != nil {
				errs[i] = err
				return
			}
			if f.Fence() <= 0 {
				t.Errorf("fence %d, want > 0", f.Fence())
			}
			errs[i] = f.Release(dctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	if n := rdb.Exists(ctx, p+"piped:0", p+"piped:"+strconv.Itoa(callers-1), p+"fenced:0").Val(); n != 0 {
		t.Errorf("%d keys left after Release", n)
	}
}

package collector

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/redisson"
	"github.com/lockscope/lockscope/internal/redistest"
	"github.com/lockscope/lockscope/lock"
)

// redissonProc is a node-redisson client taking one lock (testdata/
// redisson_lock.js): it waits if the lock is held, then holds it, its
// watchdog renewing it, until killed.
type redissonProc struct {
	cmd      *exec.Cmd
	mu       sync.Mutex
	acquired time.Time
	done     chan struct{}
}

func startRedisson(t *testing.T, port int, key string, watchdog time.Duration) *redissonProc {
	t.Helper()
	cmd := exec.Command("node", filepath.Join("testdata", "redisson_lock.js"), strconv.Itoa(port), key, strconv.FormatInt(watchdog.Milliseconds(), 10))
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(repoRoot(t), "tools", "foreign", "node_modules"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("node-redisson (tools/foreign, scripts/deps.sh): %v", err)
	}
	p := &redissonProc{cmd: cmd, done: make(chan struct{})}
	waiting := make(chan struct{})
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if line == "waiting" {
				close(waiting)
			}
			if ms, ok := strings.CutPrefix(line, "acquired "); ok {
				n, _ := strconv.ParseInt(ms, 10, 64)
				p.mu.Lock()
				p.acquired = time.UnixMilli(n)
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("node-redisson stderr: %s", stderr.String())
		}
	})
	select {
	case <-waiting:
	case <-p.done:
		t.Fatalf("node-redisson exited: %s", stderr.String())
	case <-time.After(15 * time.Second):
		t.Fatal("node-redisson did not start within 15s")
	}
	return p
}

func (p *redissonProc) acquiredAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acquired
}

// A Redisson lock taken with node-redisson (a real client of Redisson's
// layout): held by its holder, named for what it is; the two callers
// waiting for it (subscribed to its channel) counted as its waiters; a
// forced release of what the operator saw wakes one of them at once
// (Redisson's unlock message), which takes it after a wait (contention);
// that holder crashes, its watchdog stops, the lock expires, and the last
// waiter takes it. A release quoting a fingerprint the hash no longer has
// changes nothing.
func TestWatchRedissonLocksOfNodeRedisson(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	agg, reg := testAgg(t, state.Config{})
	stream := "lockscope:events"
	c := startFeeder(t, rdb, agg, &Options{Stream: stream, Replica: "rdz", Watch: []string{"rdz:*"}})
	waitSynced(t, c, 1)
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream, FlushInterval: 10 * time.Millisecond})
	defer em.Close(ctx)
	rel := redisson.NewReleaser(lock.New(rdb, nil), rdb, em)

	const key, watchdog = "rdz:invoice", 6 * time.Second
	holderName := func() string {
		l, ok := redisson.Parse(rdb.HGetAll(ctx, key).Val())
		if !ok {
			return ""
		}
		return l.Owner()
	}
	holder := startRedisson(t, srv.Port(), key, watchdog)
	waitFor(t, "the holder's lock", func() bool { return !holder.acquiredAt().IsZero() })
	first := holderName()
	waitFor(t, "the Redisson lock held in the state", func() bool {
		li := lockInfo(agg, key)
		return li.Held && li.Passive && li.Owner == first && li.TTL > 0 && li.TTL <= watchdog
	})
	if !strings.HasPrefix(first, "redisson ") || strings.Count(first, ":") != 1 {
		t.Errorf("holder named %q, want \"redisson <client id>:<thread>\", both shortened", first)
	}

	waiters := []*redissonProc{startRedisson(t, srv.Port(), key, watchdog), startRedisson(t, srv.Port(), key, watchdog)}
	waitFor(t, "two waiters", func() bool { return lockInfo(agg, key).Waiters == 2 })
	if n := rdb.PubSubNumSub(ctx, redisson.Channel(key)).Val()[redisson.Channel(key)]; n != 2 {
		t.Errorf("PUBSUB NUMSUB %s = %d, want 2", redisson.Channel(key), n)
	}
	if got := metric(t, reg, "lockscope_waiters"); got != 2 {
		t.Errorf("lockscope_waiters = %v, want 2", got)
	}

	h, err := rel.Inspect(ctx, key)
	if err != nil || h.Owner != first || !h.Foreign || !strings.Contains(h.Value, "×1") || h.TTL <= 0 {
		t.Fatalf("Inspect(%q) = %+v, %v; want %s, foreign, its reentrancy count and TTL", key, h, err, first)
	}
	if _, err := rel.ForceRelease(ctx, key, strings.Repeat("0", 40), "ops", "stale look"); !errors.Is(err, lock.ErrOwnerChanged) {
		t.Errorf("ForceRelease with another fingerprint = %v, want ErrOwnerChanged", err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 1 {
		t.Fatalf("a refused release deleted the lock")
	}
	// Redisson's watchdog keeps at least 2/3 of its lease left: without the
	// unlock message the waiters would try again seconds from now.
	released := time.Now()
	if _, err := rel.ForceRelease(ctx, key, h.Fingerprint, "ops", "invoice export hung"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	var next, last *redissonProc
	waitFor(t, "a waiter woken by the release", func() bool {
		for i, w := range waiters {
			if !w.acquiredAt().IsZero() {
				next, last = w, waiters[1-i]
				return true
			}
		}
		return false
	})
	if took := next.acquiredAt().Sub(released); took > 1500*time.Millisecond {
		t.Errorf("a waiter took the lock %v after the forced release, want within 1.5s: woken by the unlock message", took)
	}
	second := holderName()
	waitFor(t, "the woken waiter holds it, the other still waits", func() bool {
		li := lockInfo(agg, key)
		return li.Held && li.Owner == second && li.Waiters == 1
	})
	if li := lockInfo(agg, key); li.Contentions < 1 || second == first {
		t.Errorf("after the release: %+v; want the waiter's acquisition counted as contended, by another holder", li)
	}
	waitFor(t, "the forced release counted", func() bool { return metric(t, reg, "lockscope_forced_releases_total") == 1 })

	// The new holder crashes: its watchdog stops, the lock expires, the last
	// waiter takes it.
	next.cmd.Process.Signal(syscall.SIGKILL)
	waitFor(t, "the crashed holder's lock expired", func() bool {
		for _, e := range agg.Expirations(10) {
			if e.Key == key && e.Owner == second && e.Confirmed {
				return true
			}
		}
		return false
	})
	waitFor(t, "the last waiter holds it", func() bool { return !last.acquiredAt().IsZero() })
	third := holderName()
	waitFor(t, "the state follows", func() bool {
		li := lockInfo(agg, key)
		return li.Held && li.Owner == third && li.Waiters == 0
	})
	if third == second || third == first {
		t.Errorf("holders %q, %q, %q: want three", first, second, third)
	}
	// node-redisson's waiters come and go from the channel (a wait's timer
	// unsubscribes the client from the next wait's subscription): which of
	// its waits were seen ending by a give-up is not asserted, the
	// acquisitions are.
	if got := metric(t, reg, "lockscope_acquisitions_total"); got != 3 {
		t.Errorf("lockscope_acquisitions_total = %v, want 3 (holder, woken waiter, last waiter)", got)
	}
}

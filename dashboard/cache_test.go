package dashboard

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// slowLocks is a Querier whose Locks takes took by the test's clock and
// waits for release, counting its computations and how many run at once.
type slowLocks struct {
	Querier
	clk     *fakeClock
	took    time.Duration
	release chan struct{}
	calls   atomic.Int64
	running atomic.Int64
	most    atomic.Int64
}

func (q *slowLocks) Locks(lq state.LockQuery) state.LockPage {
	n := q.calls.Add(1)
	r := q.running.Add(1)
	for m := q.most.Load(); r > m && !q.most.CompareAndSwap(m, r); m = q.most.Load() {
	}
	if q.release != nil {
		<-q.release
	}
	q.clk.add(q.took)
	q.running.Add(-1)
	return state.LockPage{Total: int(n), Locks: []state.LockInfo{{Key: lq.Search}}}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Requests that ask the same query while it is computed share that one
// computation and its answer.
func TestSharedQuerierJoinsARunningComputation(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	// Computed in under reuseMin: a reader that came after it ended would
	// compute again; only joining shares it.
	q := &slowLocks{clk: clk, took: reuseMin / 2, release: make(chan struct{})}
	s := newSharedQuerier(q, clk.now)
	var joined atomic.Int64
	s.joined = func() { joined.Add(1) }
	const readers = 50
	var wg sync.WaitGroup
	got := make([]state.LockPage, readers)
	for i := range readers {
		wg.Go(func() { got[i] = s.Locks(state.LockQuery{Search: "x"}) })
	}
	redistest.WaitFor(t, 30*time.Second, "the computation to start", func() bool { return q.calls.Load() > 0 })
	redistest.WaitFor(t, 30*time.Second, "every other reader to wait for it", func() bool { return joined.Load() == readers-1 })
	close(q.release)
	wg.Wait()
	if n := q.calls.Load(); n != 1 {
		t.Errorf("%d readers asking at once made %d computations, want 1", readers, n)
	}
	for i, p := range got {
		if p.Total != 1 {
			t.Errorf("reader %d got computation %d, want the shared first", i, p.Total)
		}
	}
}

// An answer is reused for ten times what it took, then computed again; one
// that took under a millisecond (a small state) is never reused.
func TestSharedQuerierReusesByCost(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	q := &slowLocks{clk: clk, took: 5 * time.Millisecond}
	s := newSharedQuerier(q, clk.now)
	lq := state.LockQuery{Search: "x"}
	s.Locks(lq)
	clk.add(40 * time.Millisecond) // 45 ms after the computation began: within 10 × 5 ms
	if p := s.Locks(lq); q.calls.Load() != 1 || p.Total != 1 {
		t.Errorf("45 ms after a 5 ms computation: %d computations, want the answer reused", q.calls.Load())
	}
	if s.Locks(state.LockQuery{Search: "y"}); q.calls.Load() != 2 {
		t.Errorf("another query: %d computations, want 2", q.calls.Load())
	}
	clk.add(20 * time.Millisecond) // 65 ms: past 10 × 5 ms
	if s.Locks(lq); q.calls.Load() != 3 {
		t.Errorf("65 ms after a 5 ms computation: %d computations, want it computed again", q.calls.Load())
	}

	q.took = 500 * time.Microsecond
	small := state.LockQuery{Search: "small"}
	s.Locks(small)
	s.Locks(small)
	if n := q.calls.Load(); n != 5 {
		t.Errorf("a query computed in 0.5 ms, asked twice at once: %d computations in all, want 5: never reused", n)
	}
}

// At most as many computations run at once as there are slots, whatever
// the number of distinct queries asked.
func TestSharedQuerierBoundsComputations(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	q := &slowLocks{clk: clk, took: 5 * time.Millisecond, release: make(chan struct{})}
	s := newSharedQuerier(q, clk.now)
	slots := int64(cap(s.builds))
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { s.Locks(state.LockQuery{Search: fmt.Sprint(i)}) })
	}
	// Every request is computing or waiting for a slot: none is on its way
	// to a computation it could start past the bound.
	redistest.WaitFor(t, 30*time.Second, "every request computing or waiting for a slot", func() error {
		if r, w := q.running.Load(), slotWaiters(); r+int64(w) != 20 {
			return fmt.Errorf("%d computing, %d waiting for a slot", r, w)
		}
		return nil
	})
	close(q.release)
	wg.Wait()
	if m := q.most.Load(); m != slots {
		t.Errorf("%d computations ran at once, want %d", m, slots)
	}
	if n := q.calls.Load(); n != 20 {
		t.Errorf("%d computations for 20 distinct queries, want 20", n)
	}
}

// slotWaiters counts the goroutines blocked on a computation slot of a
// sharedQuerier (the send on its builds channel), from a dump of every
// goroutine's stack.
func slotWaiters() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	waiting := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, " [chan send") && strings.Contains(g, "(*sharedQuerier).get(") {
			waiting++
		}
	}
	return waiting
}

package dashboard

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
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
	for q.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for joined.Load() < readers-1 { // every other reader waits for it
		time.Sleep(time.Millisecond)
	}
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
	for q.running.Load() < slots {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // time for a computation past the bound to start, were there one
	close(q.release)
	wg.Wait()
	if m := q.most.Load(); m != slots {
		t.Errorf("%d computations ran at once, want %d", m, slots)
	}
	if n := q.calls.Load(); n != 20 {
		t.Errorf("%d computations for 20 distinct queries, want 20", n)
	}
}

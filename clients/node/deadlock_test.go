package node

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestDeadlockAcrossNodeAndGo: a Node service holds orders:1 in using() and
// waits for stock:1, which a Go service (the lock package) holds while it
// waits for orders:1. The real lockscope serve finds the cycle of two and
// shows both waiters where it shows ours: /api/v1/blocking, the keys'
// waiters_now, lockscope_waiters and lockscope_deadlock_cycles. Once the Go
// service gives up, the Node one gets its lock and the picture clears.
func TestDeadlockAcrossNodeAndGo(t *testing.T) {
	srv, sv, party := onDashboard(t)
	rdb := srv.Client(t)
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{FlushInterval: 10 * time.Millisecond})
	defer em.Close(context.Background())
	keys := []string{"orders:1", "stock:1"}
	owners := []string{"node-service", "go-service"}

	node := party("deadlock", "--owner", owners[0], "--first", keys[0], "--second", keys[1], "--go", "go")
	leases := map[string]string{owners[0]: strings.Fields(node.expect(t, "holding ", 30*time.Second))[1]}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := lock.New(rdb, &lock.Options{Owner: owners[1], Recorder: em})
	held, err := c.Obtain(ctx, keys[1], time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	leases[owners[1]] = held.ID()
	goCtx, stopGo := context.WithCancel(held.Context())
	defer stopGo()
	goDone := make(chan error, 1)
	go func() {
		// The lease's context lists the lease in the waiting event; the
		// test's cancel ends the wait.
		_, err := c.Obtain(goCtx, keys[0], time.Minute, &lock.ObtainOptions{Retry: lock.LinearBackoff(20 * time.Millisecond)})
		held.Release(context.Background())
		goDone <- err
	}()
	rdb.Set(ctx, "go", "1", time.Minute)
	formed := time.Now()

	var b struct {
		Waiters   int `json:"waiters"`
		Deadlocks [][]struct {
			Owner    string `json:"owner"`
			Lease    string `json:"lease"`
			Holds    string `json:"holds"`
			WaitsFor string `json:"waits_for"`
		} `json:"deadlocks"`
	}
	redistest.WaitFor(t, 15*time.Second, "the cycle of two in /api/v1/blocking", func() bool {
		sv.Get("/api/v1/blocking", &b)
		return len(b.Deadlocks) == 1 && len(b.Deadlocks[0]) == 2
	})
	t.Logf("the cycle shown %v after it formed", time.Since(formed).Round(time.Millisecond))
	type member struct{ Owner, Holds, WaitsFor string }
	var got []member
	waiting := map[string]string{} // owner -> the lease its waiting call will hold
	for _, m := range b.Deadlocks[0] {
		got = append(got, member{m.Owner, m.Holds, m.WaitsFor})
		waiting[m.Owner] = m.Lease
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Owner > got[j].Owner })
	want := []member{{owners[0], keys[0], keys[1]}, {owners[1], keys[1], keys[0]}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("deadlock members (-want +got):\n%s", d)
	}
	if b.Waiters != 2 {
		t.Errorf("/api/v1/blocking waiters = %d, want 2", b.Waiters)
	}
	for i, key := range keys {
		waiter, holder := owners[1-i], owners[i]
		d := sv.Lock(key)
		if len(d.WaitersNow) != 1 {
			t.Errorf("%s waiters_now %+v, want %s alone", key, d.WaitersNow, waiter)
			continue
		}
		w := d.WaitersNow[0]
		if w.Owner != waiter || w.Lease != waiting[waiter] || w.Holder != holder || !slices.Equal(w.Holds, []string{leases[waiter]}) {
			t.Errorf("%s waiter %+v; want %s (lease %s) holding %s, waiting on %s", key, w, waiter, waiting[waiter], leases[waiter], holder)
		}
		if d.Owner != holder || d.Lease != leases[holder] || d.Redis == nil || d.Redis.Owner != holder || d.Redis.Foreign {
			t.Errorf("%s: holder %q (lease %s), in Redis %+v; want %s (lease %s) in both, read from its value", key, d.Owner, d.Lease, d.Redis, holder, leases[holder])
		}
	}
	redistest.WaitFor(t, 5*time.Second, "lockscope_deadlock_cycles 1", func() bool {
		return sv.Metric("lockscope_deadlock_cycles", nil) == 1
	})
	if n := sv.Metric("lockscope_waiters", nil); n != 2 {
		t.Errorf("lockscope_waiters summed = %v, want 2", n)
	}
	if n := sv.Metric("lockscope_deadlocks_detected_total", nil); n != 1 {
		t.Errorf("lockscope_deadlocks_detected_total = %v, want 1", n)
	}

	// The Go service gives up and releases: the Node service gets stock:1.
	stopGo()
	if err := <-goDone; err == nil {
		t.Error("the Go service got the lock of a deadlock")
	}
	node.expect(t, "acquired", 30*time.Second)
	node.wait(t, 30*time.Second)
	redistest.WaitFor(t, 10*time.Second, "the deadlock and the waiters to clear", func() bool {
		sv.Get("/api/v1/blocking", &b)
		return len(b.Deadlocks) == 0 && b.Waiters == 0 && sv.Metric("lockscope_waiters", nil) == 0
	})
	// Two emitters write the stream: the Go release may land after the
	// Node service's steps, so those are checked in order, the Go release
	// by its presence.
	d := settled(t, sv, keys[1], func(d lockDetail) bool { return !d.Held && slices.Contains(d.RecentSteps(), "released node-service") })
	var nodeSteps []string
	for _, s := range d.RecentSteps() {
		if f := strings.Fields(s); f[1] == owners[0] || strings.HasPrefix(f[1], owners[0]+":") {
			nodeSteps = append(nodeSteps, f[0])
		}
	}
	if !slices.Equal(nodeSteps, []string{"waiting", "acquired", "released"}) || !slices.Contains(d.RecentSteps(), "released go-service") {
		t.Errorf("%s's events %q: want node-service's wait, acquired and released, and go-service's release", keys[1], d.RecentSteps())
	}
}

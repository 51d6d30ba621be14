package reliability

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestRestartedReplicaCountsStuckOnce: a replica counts 3 stuck holds in
// lockscope_incidents_total{kind="stuck"}, is restarted (same replica, it
// rebuilds its picture from the stream), and 2 more holds become stuck: the
// restarted process counts the 2 new ones only, though it sees all 5 stuck
// (before, it counted the 3 again: 5 where 3 were new), so that increase()
// over the restart counts each once, as docs/operating.md says.
func TestRestartedReplicaCountsStuckOnce(t *testing.T) {
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := testCtx(t, 3*time.Minute)
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{FlushInterval: 10 * time.Millisecond})
	defer em.Close(ctx)
	app := lock.New(rdb, &lock.Options{Owner: "worker", Recorder: em})
	hold := func(key string) {
		t.Helper()
		if _, err := app.Obtain(ctx, key, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		if err := em.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"--stuck-after", "2s"}
	a := startServe(t, bin, srv.URL(), nil, args...)
	for i := range 3 {
		hold(fmt.Sprint("stuck:old:", i))
	}
	stuck := func(p *proc) (incidents, now float64) {
		m, _, err := scrape(ctx, p.url("/metrics"))
		if err != nil {
			return -1, -1
		}
		return m.sum("lockscope_incidents_total", "kind", "stuck"), m.sum("lockscope_stuck_locks")
	}
	if !redistest.Poll(ctx, func() bool { n, _ := stuck(a); return n == 3 }) {
		t.Fatal("the first replica never counted the 3 stuck holds")
	}
	a.stop(t, 30*time.Second)
	b := startServeOn(t, bin, srv.URL(), a.listen, nil, args...)
	for i := range 2 {
		hold(fmt.Sprint("stuck:new:", i))
	}
	var n, now float64
	if !redistest.Poll(ctx, func() bool { n, now = stuck(b); return now == 5 && n >= 2 }) {
		t.Fatalf("restarted replica: %v stuck incidents counted, %v stuck now; want all 5 stuck and the 2 new counted", n, now)
	}
	if n != 2 {
		t.Errorf("restarted replica counted %v stuck incidents, want 2 (the new ones)", n)
	}
}

package reliability

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// BenchmarkServeMemory measures the peak RSS (VmHWM) of the real `lockscope
// serve` binary with its default --max-keys (200 000) while it drains a
// stream of 1 M events over 500 000 distinct keys (more keys than it keeps:
// eviction runs) and, all along and for 10 s after, four clients keep
// reading the pages and the API an operator would open (overview, keys pages
// sorted and paged, key pages, the blocking view, the JSON lists, /metrics).
//
//	go test -run '^$' -bench BenchmarkServeMemory -benchtime 1x -count 3 ./test/reliability/
func BenchmarkServeMemory(b *testing.B) {
	bin := redistest.Lockscope(b)
	srv := redistest.Start(b, redistest.Options{})
	rdb := srv.Client(b)
	ctx := testCtx(b, 10*time.Minute)
	var peak int64
	for i := 0; i < b.N; i++ {
		stream := "mem:" + strconv.Itoa(i)
		fillStream(ctx, b, lock.NewStreamSink(rdb, stream, -1), 500_000, drainEvents)
		p := startServe(b, bin, srv.URL(), nil, "--stream", stream)
		qctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		paths := []string{"/", "/?window=1h&by=wait", "/keys", "/keys?sort=wait&page=3", "/keys?q=order:1", "/blocking",
			"/api/v1/locks?limit=200", "/api/v1/hotkeys", "/api/v1/overview", "/metrics"}
		for c := range 4 {
			wg.Go(func() {
				for n := c; qctx.Err() == nil; n++ {
					path := paths[n%len(paths)]
					if n%7 == 0 {
						path = "/keys/order:" + strconv.Itoa(n*7919%500_000)
					}
					if resp, err := http.Get(p.url(path)); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			})
		}
		if !redistest.Poll(ctx, func() bool {
			m, _, err := scrape(ctx, p.url("/metrics"))
			return err == nil && m.sum("lockscope_events_total") >= drainEvents
		}) {
			b.Fatal("serve did not count every event")
		}
		time.Sleep(10 * time.Second)
		stop()
		wg.Wait()
		hwm, err := redistest.PeakRSS(p.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		peak = max(peak, hwm)
		p.kill(b)
		rdb.Del(ctx, stream)
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MB")
}

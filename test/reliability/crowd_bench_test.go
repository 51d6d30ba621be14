package reliability

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

var (
	crowdFor = flag.Duration("crowd-for", 20*time.Second, "BenchmarkServeCrowd: how long the crowd reads")
	crowdBin = flag.String("crowd-bin", "", "BenchmarkServeCrowd: the lockscope binary to measure (default: built from this tree)")
)

// BenchmarkServeCrowd measures the real `lockscope serve` under a crowd of
// readers: 100 000 tracked keys (10 000 of them held), a live stream of
// 2 000 events/s changing them, and 200 clients reading for -crowd-for
// (20 s), each as fast as it is answered, half of them the keys page and
// half /api/v1/locks, while one more asks /healthz every 50 ms. Reported:
// p50 and p99 of each (ms), the answers per second, and serve's peak RSS.
// -crowd-bin measures another binary (an older build) on the same workload:
//
//	go test -run '^$' -bench BenchmarkServeCrowd -benchtime 1x -count 3 ./test/reliability/
//	go test -run '^$' -bench BenchmarkServeCrowd -benchtime 1x -count 3 ./test/reliability/ -crowd-bin /tmp/lockscope-old
func BenchmarkServeCrowd(b *testing.B) {
	bin := *crowdBin
	if bin == "" {
		bin = redistest.Lockscope(b)
	}
	srv := redistest.Start(b, redistest.Options{})
	rdb := srv.Client(b)
	ctx := testCtx(b, 10*time.Minute)
	const keys, held = 100_000, 10_000
	var lat = map[string][]time.Duration{}
	var answers, failures int
	var peak int64
	var spent time.Duration
	for i := 0; i < b.N; i++ {
		stream := "crowd:" + strconv.Itoa(i)
		sink := lock.NewStreamSink(rdb, stream, -1)
		fillStream(ctx, b, sink, keys, 2*keys)
		now := time.Now().UnixNano()
		var hs []event.Event
		for k := range held {
			hs = append(hs, event.Event{Type: event.Acquired, Key: "order:" + strconv.Itoa(k*7), Owner: "worker/host-2/7",
				Lease: fmt.Sprintf("h%x", k), TS: now, TTL: time.Hour, Attempts: 1 + k%3, Wait: time.Millisecond})
		}
		if err := sink.Write(ctx, hs); err != nil {
			b.Fatal(err)
		}
		p := startServe(b, bin, srv.URL(), nil, "--stream", stream)
		if !redistest.Poll(ctx, func() bool {
			m, _, err := scrape(ctx, p.url("/metrics"))
			return err == nil && m.sum("lockscope_events_total") >= 2*keys+held
		}) {
			b.Fatal("serve did not read the stream")
		}

		runCtx, stop := context.WithTimeout(ctx, *crowdFor)
		var wg sync.WaitGroup
		wg.Go(func() { // 2 000 events/s: 100 acquire and release pairs every 100 ms
			for n, tick := 0, time.NewTicker(100*time.Millisecond); runCtx.Err() == nil; <-tick.C {
				var evs []event.Event
				for range 100 {
					k, ts := "order:"+strconv.Itoa(rand.IntN(keys)), time.Now().UnixNano()
					lease := fmt.Sprintf("live%x", n)
					n++
					evs = append(evs,
						event.Event{Type: event.Acquired, Key: k, Owner: "api/host-1/42", Lease: lease, TS: ts, Wait: 200 * time.Microsecond, TTL: 30 * time.Second, Attempts: 1 + n%2},
						event.Event{Type: event.Released, Key: k, Owner: "api/host-1/42", Lease: lease, TS: ts + 1000, Hold: time.Microsecond})
				}
				sink.Write(runCtx, evs)
			}
		})
		tr := &http.Transport{MaxIdleConnsPerHost: 256}
		client := &http.Client{Transport: tr}
		var mu sync.Mutex
		record := func(route string, d time.Duration, ok bool) {
			mu.Lock()
			lat[route] = append(lat[route], d)
			if ok {
				answers++
			} else {
				failures++
			}
			mu.Unlock()
		}
		fetch := func(path string) bool {
			req, _ := http.NewRequestWithContext(runCtx, http.MethodGet, p.url(path), nil)
			resp, err := client.Do(req)
			if err != nil {
				return false
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return err == nil && resp.StatusCode == http.StatusOK
		}
		start := time.Now()
		for c := range 200 {
			route, path := "keys", "/keys"
			if c%2 == 1 {
				route, path = "api", "/api/v1/locks"
			}
			wg.Go(func() {
				for runCtx.Err() == nil {
					t0 := time.Now()
					ok := fetch(path)
					if runCtx.Err() == nil {
						record(route, time.Since(t0), ok)
					}
				}
			})
		}
		wg.Go(func() {
			for tick := time.NewTicker(50 * time.Millisecond); runCtx.Err() == nil; <-tick.C {
				t0 := time.Now()
				ok := fetch("/healthz")
				if runCtx.Err() == nil {
					record("healthz", time.Since(t0), ok)
				}
			}
		})
		wg.Wait()
		stop()
		spent += time.Since(start)
		tr.CloseIdleConnections()
		hwm, err := redistest.PeakRSS(p.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		peak = max(peak, hwm)
		p.kill(b)
		rdb.Del(ctx, stream)
	}
	for _, route := range []string{"keys", "api", "healthz"} {
		l := lat[route]
		slices.Sort(l)
		if len(l) == 0 {
			b.Fatalf("no %s answer", route)
		}
		q := func(f float64) float64 { return float64(l[int(f*float64(len(l)-1))].Microseconds()) / 1000 }
		b.ReportMetric(q(0.5), route+"-p50-ms")
		b.ReportMetric(q(0.99), route+"-p99-ms")
	}
	b.ReportMetric(float64(answers)/spent.Seconds(), "answers/s")
	b.ReportMetric(float64(failures), "failures")
	b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MB")
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		b.Logf("load average after: %s", load)
	}
}

package dashboard

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

// benchAggregator is a real Aggregator holding 100 k tracked keys, 10 k of
// them held (1 k of those past the stuck threshold, 2 k with a waiter), all
// contended.
func benchAggregator(b testing.TB) *state.Aggregator {
	b.Helper()
	now := time.Now()
	agg := state.New(state.Config{Now: func() time.Time { return now }})
	classes := []string{"orders", "invoice", "cart", "report/daily", "inventory", "sync:tenant", "payout", "email:batch", "search:reindex", "ledger"}
	const keys, held, stuck = 100_000, 10_000, 1_000
	evs := make([]event.Event, 0, 4096)
	flush := func() { agg.Apply(evs); evs = evs[:0] }
	for i := range keys {
		key := classes[i%len(classes)] + ":" + strconv.Itoa(i)
		owner := "worker-" + strconv.Itoa(i%64) + "/ip-10-0-" + strconv.Itoa(i%8) + "-1/" + strconv.Itoa(1000+i%97)
		lease := "l" + strconv.Itoa(i)
		at := now.Add(-time.Duration(i%50_000) * time.Millisecond) // the last 50 s
		if i < stuck {
			at = now.Add(-10 * time.Minute)
		}
		wait := time.Duration(i%200) * time.Millisecond
		evs = append(evs, event.Event{Type: event.Acquired, Key: key, Owner: owner, Lease: lease, TS: at.UnixNano(), Wait: wait, Attempts: 1 + i%4, TTL: time.Hour})
		if i < held && i%5 == 0 { // 2 000 held keys have a caller waiting
			evs = append(evs, event.Event{Type: event.Waiting, Key: key, Owner: "waiter-" + strconv.Itoa(i%64), Lease: "w" + strconv.Itoa(i), TS: now.UnixNano(), Wait: time.Hour, Holder: owner})
		}
		if i >= held {
			hold := time.Duration(1+i%50) * time.Millisecond
			evs = append(evs, event.Event{Type: event.Released, Key: key, Owner: owner, Lease: lease, TS: at.Add(hold).UnixNano(), Hold: hold})
		}
		if len(evs) >= 4000 {
			flush()
		}
	}
	flush()
	agg.Tick()
	if o := agg.Overview(); o.TrackedKeys != keys || o.Held != held {
		b.Fatalf("aggregator tracks %d keys, %d held; want %d, %d", o.TrackedKeys, o.Held, keys, held)
	}
	return agg
}

// BenchmarkPages renders the overview and keys pages against 100 k tracked
// keys and reports per-request p50 and p99 (the target is p99 <= 50 ms).
func BenchmarkPages(b *testing.B) {
	agg := benchAggregator(b)
	h, err := New(agg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, target string }{
		{"overview", "/"},
		{"overview-1h-wait", "/?window=1h&by=wait"},
		{"keys", "/keys"}, // by attention: stuck, held with waiters, held, then contentions
		{"keys-sort-contentions", "/keys?sort=contentions"},
		{"keys-state-stuck", "/keys?state=stuck"},
		{"keys-state-waited", "/keys?state=waited"},
		{"keys-state-free-page-50", "/keys?state=free&page=50"},
		{"keys-sort-hold-page-100", "/keys?sort=hold&page=100"},
		{"keys-search", "/keys?q=worker-7/&sort=wait"},
		{"keys-class-held", "/keys?class=orders:*&held=1"},
		{"api-locks", "/api/v1/locks?limit=500"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, bc.target, nil)
			var durs []time.Duration
			for b.Loop() {
				w := &discardWriter{h: http.Header{}}
				start := time.Now()
				h.ServeHTTP(w, req)
				durs = append(durs, time.Since(start))
				if w.code != http.StatusOK {
					b.Fatalf("GET %s = %d", bc.target, w.code)
				}
			}
			slices.Sort(durs)
			q := func(p float64) float64 {
				return float64(durs[min(len(durs)-1, int(p*float64(len(durs))))]) / float64(time.Millisecond)
			}
			b.ReportMetric(q(0.50), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
		})
	}
}

type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return io.Discard.Write(p)
}
func (w *discardWriter) WriteHeader(code int) { w.code = code }

package reliability

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// hostileRSSBudget is the peak resident set size docs/deployment.md ("What a writer of
// the stream can do") promises for `lockscope serve` with its defaults,
// whatever the stream carries.
const hostileRSSBudget = 320 << 20

// TestHostileStreamMemoryBounded sends the real `lockscope serve`, with its
// defaults, what a hostile writer of the stream (anyone who may XADD to it:
// every application's Redis user) sent it in the review of issue 27, each
// of which took it past half a gigabyte:
//
//   - 5 000 keys × 64 events, owners, leases and reasons of 512 distinct
//     bytes each (537 MB before);
//   - 6 766 keys of 64 KiB (448 MB);
//   - 3 000 waiters with 64 KiB strings (592 MB, and a /blocking page of
//     198 MB);
//
// and checks that its peak RSS stays within hostileRSSBudget, that every
// cut was counted, and that no page or API answer it serves meanwhile is
// larger than a few hundred kilobytes.
func TestHostileStreamMemoryBounded(t *testing.T) {
	h := startHostile(t)
	h.longStrings()
	h.longKeys()
	h.longWaiters()
	m := h.p.metrics(h.ctx, t)
	if got := m.sum("lockscope_event_fields_cut_total", "field", "key"); got != 6766 {
		t.Errorf("keys cut = %v, want 6766 (their events skipped)", got)
	}
	h.checkWaiters(m)
	h.checkPages()
	h.checkPeak()
}

// TestHostileStreamMemoryStringsThenWaiters is the fourth review's
// sequence: the 5 000 keys × 64 events of 512-byte strings, then the 3 000
// waiters with 64 KiB strings, sent while serve is stopped (SIGSTOP) so
// that it finds them all at once after a stream of small entries (the
// review saw 426 MB, twice, on a quiet machine; here it stays near 160 MB
// with and without the stop, on a loaded host).
func TestHostileStreamMemoryStringsThenWaiters(t *testing.T) {
	h := startHostile(t)
	h.longStrings()
	// serve lags behind the writer: it reads the waiters' entries after
	// a read sized for the small ones.
	h.p.cmd.Process.Signal(syscall.SIGSTOP)
	h.sendLongWaiters()
	h.p.cmd.Process.Signal(syscall.SIGCONT)
	h.consumed("3 000 waiters with 64 KiB strings, sent while serve was stopped")
	h.checkWaiters(h.p.metrics(h.ctx, t))
	h.checkPages()
	h.checkPeak()
}

// hostile is a `lockscope serve` with its defaults and a writer of its
// stream who sends it the attacks of the reviews.
type hostile struct {
	t      *testing.T
	ctx    context.Context
	rdb    *redis.Client
	p      *proc
	stream string
	sent   int // events sent
	n      int // events made, for their timestamps and distinct strings
	now    time.Time
}

func startHostile(t *testing.T) *hostile {
	bin := redistest.LockscopePlain(t) // the binary as it ships: -race would multiply its memory
	srv := redistest.Start(t, redistest.Options{})
	// XADDs of megabytes to a Redis that the ingesting serve keeps busy: no
	// deadline but the test's, as on a loaded host 3 s may pass.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { rdb.Close() })
	const stream = "hostile:events"
	return &hostile{t: t, ctx: redistest.Context(t), // half a gigabyte of XADDs: no host is too slow for them
		rdb: rdb, p: startServe(t, bin, srv.URL(), nil, "--stream", stream), stream: stream, now: time.Now()}
}

func (h *hostile) ts(i int) int64 { return h.now.Add(time.Duration(i) * time.Microsecond).UnixNano() }

func pad(tag string, i, n int) string {
	return fmt.Sprintf("%s%08d", tag, i) + strings.Repeat("x", n-len(tag)-8)
}

// send XADDs evs, packed 64 to an entry (as the Go emitter does).
func (h *hostile) send(evs []event.Event) {
	h.t.Helper()
	h.sent += len(evs)
	for len(evs) > 0 {
		part := evs[:min(len(evs), 64)]
		evs = evs[len(part):]
		batch, ext := event.PackAll(part)
		if err := h.rdb.XAdd(h.ctx, &redis.XAddArgs{Stream: h.stream, Values: event.PackedEntry(len(part), batch, ext)}).Err(); err != nil {
			h.t.Fatalf("XADD: %v", err)
		}
	}
}

// consumed waits until serve has read every event sent, then trims the
// stream so that Redis does not hold the attacks too.
func (h *hostile) consumed(name string) {
	h.t.Helper()
	if !redistest.Poll(h.ctx, func() bool {
		m, _, err := scrape(h.ctx, h.p.url("/metrics"))
		return err == nil && m.sum("lockscope_events_total")+m.sum("lockscope_event_fields_cut_total", "field", "key") >= float64(h.sent)
	}) {
		h.t.Fatalf("%s: serve did not read the %d events sent", name, h.sent)
	}
	h.rdb.XTrimMaxLen(h.ctx, h.stream, 0)
	hwm, err := redistest.PeakRSS(h.p.cmd.Process.Pid)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Logf("%s: peak RSS so far %.0f MB", name, float64(hwm)/(1<<20))
}

// longStrings: 5 000 keys × 64 events of 512-byte strings, all distinct.
func (h *hostile) longStrings() {
	var evs []event.Event
	for k := range 5000 {
		key := fmt.Sprintf("hostile:a:%d", k)
		for range 32 {
			n := h.n
			lease := pad("L", n, 512)
			evs = append(evs,
				event.Event{Type: event.Acquired, Key: key, Owner: pad("O", n, 512), Lease: lease, TS: h.ts(n), TTL: time.Hour, Attempts: 1, Reason: pad("R", n, 512)},
				event.Event{Type: event.Released, Key: key, Owner: pad("P", n, 512), Lease: lease, TS: h.ts(n + 1), Reason: pad("S", n, 512)})
			h.n += 2
		}
		if len(evs) >= 4096 {
			h.send(evs)
			evs = evs[:0]
		}
	}
	h.send(evs)
	h.consumed("5 000 keys × 64 events with 512-byte strings")
}

// longKeys: 6 766 keys of 64 KiB.
func (h *hostile) longKeys() {
	var evs []event.Event
	for k := range 6766 {
		evs = append(evs, event.Event{Type: event.Acquired, Key: pad("K", k, 64<<10), Owner: "o", Lease: fmt.Sprint("L", k), TS: h.ts(h.n), TTL: time.Hour, Attempts: 2})
		h.n++
		if len(evs) == 64 {
			h.send(evs)
			evs = evs[:0]
		}
	}
	h.send(evs)
	h.consumed("6 766 keys of 64 KiB")
}

// sendLongWaiters sends the 3 000 waiters with 64 KiB strings (longWaiters
// without waiting for serve).
func (h *hostile) sendLongWaiters() {
	var evs []event.Event
	for k := range 3000 {
		key := fmt.Sprintf("hostile:w:%d", k)
		evs = append(evs,
			event.Event{Type: event.Acquired, Key: key, Owner: pad("H", k, 64<<10), Lease: pad("HL", k, 64<<10), TS: h.ts(h.n), TTL: time.Hour, Attempts: 1},
			event.Event{Type: event.Waiting, Key: key, Owner: pad("W", k, 64<<10), Lease: pad("WL", k, 64<<10), Holder: pad("WH", k, 64<<10),
				Reason: pad("HL", (k+1)%3000, 64<<10), TS: h.ts(h.n + 1), Wait: time.Hour})
		h.n += 2
		if len(evs) >= 32 {
			h.send(evs)
			evs = evs[:0]
		}
	}
	h.send(evs)
}

// longWaiters: 3 000 waiters with 64 KiB strings, waiting for 3 000 keys
// held.
func (h *hostile) longWaiters() {
	h.sendLongWaiters()
	h.consumed("3 000 waiters with 64 KiB strings")
}

// checkWaiters: the long strings were cut, each cut counted, and the 3 000
// waiters are shown.
func (h *hostile) checkWaiters(m families) {
	h.t.Helper()
	for _, f := range []string{"owner", "lease", "reason", "holder"} {
		if got := m.sum("lockscope_event_fields_cut_total", "field", f); got < 3000 {
			h.t.Errorf("%s fields cut = %v, want at least 3000", f, got)
		}
	}
	if got := m.sum("lockscope_waiters"); got != 3000 {
		h.t.Errorf("lockscope_waiters = %v, want 3000", got)
	}
}

// checkPages: every page and API answer is bounded, anonymous included.
func (h *hostile) checkPages() {
	h.t.Helper()
	for _, path := range []string{"/", "/keys", "/keys?sort=key&page=2", "/blocking", "/keys/hostile:w:7", "/keys/hostile:a:7",
		"/api/v1/overview", "/api/v1/locks?limit=500", "/api/v1/blocking", "/api/v1/locks/hostile:w:7", "/api/v1/hotkeys?n=100", "/metrics"} {
		size, status, err := bodySize(h.ctx, h.p.url(path))
		if err != nil || status != http.StatusOK {
			h.t.Errorf("GET %s: %d, %v", path, status, err)
			continue
		}
		h.t.Logf("GET %s: %d bytes", path, size)
		if size > 2<<20 {
			h.t.Errorf("GET %s: %d bytes, want at most 2 MB", path, size)
		}
	}
}

// checkPeak: serve's peak RSS stayed within hostileRSSBudget.
func (h *hostile) checkPeak() {
	h.t.Helper()
	hwm, err := redistest.PeakRSS(h.p.cmd.Process.Pid)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Logf("peak RSS %.0f MB", float64(hwm)/(1<<20))
	if hwm > hostileRSSBudget {
		h.t.Errorf("peak RSS %.0f MB, want at most %d MB", float64(hwm)/(1<<20), hostileRSSBudget>>20)
	}
}

// bodySize fetches url and returns the length of its body and its status.
func bodySize(ctx context.Context, url string) (int64, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	return n, resp.StatusCode, err
}

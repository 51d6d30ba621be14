package reliability

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/redistest"
)

// hostileRSSBudget is the peak resident set size README ("What a writer of
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
	bin := redistest.LockscopePlain(t) // the binary as it ships: -race would multiply its memory
	srv := redistest.Start(t, redistest.Options{})
	// XADDs of megabytes to a Redis that the ingesting serve keeps busy: no
	// deadline but the test's, as on a loaded host 3 s may pass.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := redistest.Context(t) // half a gigabyte of XADDs: no host is too slow for them
	const stream = "hostile:events"
	p := startServe(t, bin, srv.URL(), nil, "--stream", stream)
	pid := p.cmd.Process.Pid

	sent := 0
	send := func(evs []event.Event) {
		t.Helper()
		for len(evs) > 0 {
			part := evs[:min(len(evs), 64)]
			evs = evs[len(part):]
			batch, ext := event.PackAll(part)
			if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: event.PackedEntry(len(part), batch, ext)}).Err(); err != nil {
				t.Fatalf("XADD: %v", err)
			}
		}
	}
	// consumed waits until serve has read every event sent, then trims the
	// stream so that Redis does not hold the attacks too.
	consumed := func(name string, counted func(families) float64) {
		t.Helper()
		if !redistest.Poll(ctx, func() bool {
			m, _, err := scrape(ctx, p.url("/metrics"))
			return err == nil && counted(m) >= float64(sent)
		}) {
			t.Fatalf("%s: serve did not read the %d events sent", name, sent)
		}
		rdb.XTrimMaxLen(ctx, stream, 0)
		hwm, err := redistest.PeakRSS(pid)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: peak RSS so far %.0f MB", name, float64(hwm)/(1<<20))
	}
	applied := func(m families) float64 {
		return m.sum("lockscope_events_total") + m.sum("lockscope_event_fields_cut_total", "field", "key")
	}
	now := time.Now()
	ts := func(i int) int64 { return now.Add(time.Duration(i) * time.Microsecond).UnixNano() }
	pad := func(tag string, i, n int) string {
		return fmt.Sprintf("%s%08d", tag, i) + strings.Repeat("x", n-len(tag)-8)
	}

	// 1: 5 000 keys × 64 events of 512-byte strings, all distinct.
	var evs []event.Event
	n := 0
	for k := range 5000 {
		key := fmt.Sprintf("hostile:a:%d", k)
		for range 32 {
			lease := pad("L", n, 512)
			evs = append(evs,
				event.Event{Type: event.Acquired, Key: key, Owner: pad("O", n, 512), Lease: lease, TS: ts(n), TTL: time.Hour, Attempts: 1, Reason: pad("R", n, 512)},
				event.Event{Type: event.Released, Key: key, Owner: pad("P", n, 512), Lease: lease, TS: ts(n + 1), Reason: pad("S", n, 512)})
			n += 2
		}
		if len(evs) >= 4096 {
			send(evs)
			sent += len(evs)
			evs = evs[:0]
		}
	}
	send(evs)
	sent += len(evs)
	consumed("5 000 keys × 64 events with 512-byte strings", applied)

	// 2: 6 766 keys of 64 KiB.
	evs = evs[:0]
	for k := range 6766 {
		evs = append(evs, event.Event{Type: event.Acquired, Key: pad("K", k, 64<<10), Owner: "o", Lease: fmt.Sprint("L", k), TS: ts(n), TTL: time.Hour, Attempts: 2})
		n++
		if len(evs) == 64 {
			send(evs)
			sent += len(evs)
			evs = evs[:0]
		}
	}
	send(evs)
	sent += len(evs)
	consumed("6 766 keys of 64 KiB", applied)

	// 3: 3 000 waiters with 64 KiB strings, waiting for 3 000 keys held.
	evs = evs[:0]
	for k := range 3000 {
		key := fmt.Sprintf("hostile:w:%d", k)
		evs = append(evs,
			event.Event{Type: event.Acquired, Key: key, Owner: pad("H", k, 64<<10), Lease: pad("HL", k, 64<<10), TS: ts(n), TTL: time.Hour, Attempts: 1},
			event.Event{Type: event.Waiting, Key: key, Owner: pad("W", k, 64<<10), Lease: pad("WL", k, 64<<10), Holder: pad("WH", k, 64<<10),
				Reason: pad("HL", (k+1)%3000, 64<<10), TS: ts(n + 1), Wait: time.Hour})
		n += 2
		if len(evs) >= 32 {
			send(evs)
			sent += len(evs)
			evs = evs[:0]
		}
	}
	send(evs)
	sent += len(evs)
	consumed("3 000 waiters with 64 KiB strings", applied)

	m := p.metrics(ctx, t)
	if got := m.sum("lockscope_event_fields_cut_total", "field", "key"); got != 6766 {
		t.Errorf("keys cut = %v, want 6766 (their events skipped)", got)
	}
	for _, f := range []string{"owner", "lease", "reason", "holder"} {
		if got := m.sum("lockscope_event_fields_cut_total", "field", f); got < 3000 {
			t.Errorf("%s fields cut = %v, want at least 3000", f, got)
		}
	}
	if got := m.sum("lockscope_waiters"); got != 3000 {
		t.Errorf("lockscope_waiters = %v, want 3000", got)
	}

	// Every page and API answer is bounded, anonymous included.
	for _, path := range []string{"/", "/keys", "/keys?sort=key&page=2", "/blocking", "/keys/hostile:w:7", "/keys/hostile:a:7",
		"/api/v1/overview", "/api/v1/locks?limit=500", "/api/v1/blocking", "/api/v1/locks/hostile:w:7", "/api/v1/hotkeys?n=100", "/metrics"} {
		size, status, err := bodySize(ctx, p.url(path))
		if err != nil || status != http.StatusOK {
			t.Errorf("GET %s: %d, %v", path, status, err)
			continue
		}
		t.Logf("GET %s: %d bytes", path, size)
		if size > 2<<20 {
			t.Errorf("GET %s: %d bytes, want at most 2 MB", path, size)
		}
	}

	hwm, err := redistest.PeakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("peak RSS %.0f MB", float64(hwm)/(1<<20))
	if hwm > hostileRSSBudget {
		t.Errorf("peak RSS %.0f MB, want at most %d MB", float64(hwm)/(1<<20), hostileRSSBudget>>20)
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

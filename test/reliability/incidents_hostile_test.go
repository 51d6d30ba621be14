package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// The bounds docs/operating.md ("Incident history") gives the shared history.
const (
	incidentsKept      = 1250 // records: 1 000, trimmed past a quarter more
	incidentRecordMax  = 4096 // bytes of one stored record
	incidentsHostileNB = 65000
)

// TestHostileIncidentsBounded sends the real `lockscope serve` what the
// fourth review sent it: 65 000 forged `forced` events, 50 keys of 512
// bytes to each owner of 256 bytes, operator of 256 and reason of 512
// (1 300 incidents, a 42 MB hash before), then asks 20 anonymous clients
// for /api/v1/incidents?limit=1000 at once (26.7 MB each and 1.44 GB of
// RSS before). It checks that the hash stays within its records and bytes,
// every record within its budget, a malformed value skipped, counted and
// dropped rather than stopping the writes, every answer a few megabytes, that the
// 20 readers share a few HGETALLs rather than one each, and that serve's
// peak RSS stays within hostileRSSBudget.
func TestHostileIncidentsBounded(t *testing.T) {
	bin := redistest.LockscopePlain(t) // the binary as it ships: -race would multiply its memory
	srv := redistest.Start(t, redistest.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := redistest.Context(t)
	const stream = "hostile:events"
	p := startServe(t, bin, srv.URL(), nil, "--stream", stream)
	pid := p.cmd.Process.Pid

	// A value that is not a record (written by an older or broken
	// writer) must not stop the writes.
	hkey := stream + ":incidents"
	if err := rdb.HSet(ctx, hkey, "stuck:broken", "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	pad := func(tag string, i, n int) string {
		s := fmt.Sprintf("%s%08d", tag, i)
		return s + strings.Repeat("x", n-len(s))
	}
	// All in one 10-minute bucket of the past (the forced incidents'),
	// a millisecond apart (the history's unit).
	now := time.Now()
	base := now.Add(-70 * time.Second).Truncate(10 * time.Minute)
	var evs []event.Event
	groups := incidentsHostileNB / 50
	for g := range groups {
		for k := range 50 {
			n := g*50 + k
			evs = append(evs, event.Event{Type: event.Forced, Key: pad("hostile:f:", n, 512), Owner: pad("owner", g, 256),
				Lease: fmt.Sprint("L", n), By: pad("op", g, 256), Reason: pad("reason", g, 512),
				TS: base.Add(time.Duration(n) * time.Millisecond).UnixNano()})
		}
		if len(evs) >= 1000 || g == groups-1 {
			for len(evs) > 0 {
				part := evs[:min(len(evs), 64)]
				evs = evs[len(part):]
				batch, ext := event.PackAll(part)
				if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: event.PackedEntry(len(part), batch, ext)}).Err(); err != nil {
					t.Fatalf("XADD: %v", err)
				}
			}
		}
	}
	if !redistest.Poll(ctx, func() bool {
		m, _, err := scrape(ctx, p.url("/metrics"))
		return err == nil && m.sum("lockscope_events_total", "type", "forced") >= incidentsHostileNB
	}) {
		t.Fatal("serve did not apply the 65 000 forced events")
	}
	rdb.XTrimMaxLen(ctx, stream, 0)
	lastOwner := pad("owner", groups-1, 256)
	// The history keeps the 1 000 most recently active: once every record
	// is written, the last owner's incident heads a list of 1 000.
	t.Logf("applied the forced events in %v", time.Since(now).Round(time.Second))
	wctx := testCtx(t, 2*time.Minute)
	if !redistest.Poll(wctx, func() bool {
		got, err := incidentsOf(wctx, p)
		return err == nil && len(got) == 1000 && len(got[0].Owners) == 1 && got[0].Owners[0] == lastOwner
	}) {
		got, err := incidentsOf(ctx, p)
		first := ""
		if len(got) > 0 && len(got[0].Owners) > 0 {
			first = got[0].Owners[0][:min(16, len(got[0].Owners[0]))]
		}
		t.Fatalf("the history never listed the 1 000 newest forced incidents: %d listed (%v), the first of %q; %d stored; %v opened",
			len(got), err, first, rdb.HLen(ctx, hkey).Val(), p.metrics(ctx, t).sum("lockscope_incidents_total", "kind", "forced"))
	}
	m := p.metrics(ctx, t)
	if got := m.sum("lockscope_incidents_total", "kind", "forced"); got != float64(groups) {
		t.Errorf("lockscope_incidents_total{kind=forced} = %v, want %d", got, groups)
	}
	if got := m.sum("lockscope_incident_records_malformed_total"); got < 1 {
		t.Errorf("lockscope_incident_records_malformed_total = %v, want at least 1", got)
	}
	if rdb.HExists(ctx, hkey, "stuck:broken").Val() {
		t.Error("the malformed value is still stored after the trims")
	}
	all, err := rdb.HGetAll(ctx, hkey).Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for id, v := range all {
		total += len(v)
		if len(v) > incidentRecordMax {
			t.Errorf("record %s: %d bytes, want at most %d", id, len(v), incidentRecordMax)
		}
	}
	t.Logf("history: %d records, %d bytes", len(all), total)
	if len(all) > incidentsKept || len(all) < 1000 {
		t.Errorf("history: %d records, want 1000..%d", len(all), incidentsKept)
	}
	if total > incidentsKept*incidentRecordMax {
		t.Errorf("history: %d bytes, want at most %d", total, incidentsKept*incidentRecordMax)
	}

	before := hgetallCalls(ctx, t, rdb)
	var wg sync.WaitGroup
	sizes := make([]int, 20)
	for i := range sizes {
		wg.Go(func() {
			resp, err := http.Get(p.url("/api/v1/incidents?limit=1000"))
			if err != nil {
				t.Errorf("GET /api/v1/incidents: %v", err)
				return
			}
			defer resp.Body.Close()
			var v struct {
				Incidents []struct {
					Owners []string `json:"owners"`
					Count  int      `json:"count"`
				} `json:"incidents"`
			}
			body, err := io.ReadAll(resp.Body)
			if err == nil {
				err = json.Unmarshal(body, &v)
			}
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("GET /api/v1/incidents: %d, %v", resp.StatusCode, err)
				return
			}
			sizes[i] = len(body)
			if len(v.Incidents) != 1000 || len(v.Incidents[0].Owners) == 0 || v.Incidents[0].Owners[0] != lastOwner || v.Incidents[0].Count != 50 {
				t.Errorf("GET /api/v1/incidents: %d incidents, want 1000, the last owner's first with its 50 releases counted", len(v.Incidents))
			}
		})
	}
	wg.Wait()
	calls := hgetallCalls(ctx, t, rdb) - before
	t.Logf("20 readers: %d HGETALLs; answers of %d bytes", calls, sizes[0])
	// They share one read a second: 20 requests that take more than 10 s on
	// the busiest host still cost fewer HGETALLs than readers.
	if calls > 10 {
		t.Errorf("20 concurrent readers cost %d HGETALLs, want them to share reads", calls)
	}
	for _, n := range sizes {
		if n > 1000*incidentRecordMax {
			t.Errorf("answer of %d bytes, want at most %d", n, 1000*incidentRecordMax)
		}
	}
	if size, status, err := bodySize(ctx, p.url("/incidents")); err != nil || status != http.StatusOK || size > 2<<20 {
		t.Errorf("GET /incidents: %d bytes, %d, %v; want 200 and at most 2 MB", size, status, err)
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

// hgetallCalls is how many HGETALLs the server has run (INFO
// commandstats), scripts' included.
func hgetallCalls(ctx context.Context, t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_hgetall:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

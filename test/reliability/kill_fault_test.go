package reliability

import (
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// packedEntry returns the fields of one packed entry of n events (what the
// Go emitter writes), numbered from first.
func packedEntry(first, n int) []any {
	evs := make([]event.Event, n)
	now := time.Now().UnixNano()
	for i := range evs {
		typ := event.Acquired
		if (first+i)%2 == 1 {
			typ = event.Released
		}
		evs[i] = event.Event{Type: typ, Key: "job:" + strconv.Itoa((first+i)/2%500), Owner: "app/host/1",
			Lease: strconv.Itoa((first + i) / 2), TS: now, TTL: time.Minute, Hold: time.Millisecond}
	}
	return event.PackedFields(n, event.Pack(evs))
}

// entryEvents returns how many events a packed entry carries.
func entryEvents(t *testing.T, m redis.XMessage) int {
	n, err := strconv.Atoi(fmt.Sprint(m.Values[event.FieldCount]))
	if err != nil {
		t.Fatalf("entry %s: field n = %v", m.ID, m.Values[event.FieldCount])
	}
	return n
}

// TestCollectorKilledMidIngest writes 200k events to the stream while
// `lockscope serve` ingests them, kills it with SIGKILL mid-ingest, and
// starts it again with the same consumer name. Its state lives in memory,
// so the restarted process starts from zero; what it must count is exactly
// every event the killed one did not acknowledge: nothing lost, nothing
// counted twice by the new process. Entries the killed process applied but
// had not acknowledged are applied again by the new one (at-least-once
// across processes): their number is reported as the bound on what a
// Prometheus sum over both processes could count twice.
func TestCollectorKilledMidIngest(t *testing.T) {
	t.Parallel()
	start := time.Now()
	bin := redistest.Lockscope(t)
	t.Logf("built in %v", time.Since(start))
	srv := redistest.Start(t, redistest.Options{Notify: "none"})
	rdb := srv.Client(t)
	ctx := testCtx(t, 90*time.Second)
	const (
		stream   = event.DefaultStream
		group    = collector.DefaultGroup
		perEntry = 500
		entries  = 400
		written  = perEntry * entries // 200k events
	)
	p1 := startServe(t, bin, srv.URL(), nil, "--group", group, "--consumer", "c1")
	if !redistest.Poll(ctx, func() bool { return len(rdb.XInfoGroups(ctx, stream).Val()) == 1 }) {
		t.Fatal("serve did not create its consumer group")
	}

	// The writer: 400 packed entries of 500 events, about 250k events/s.
	var sent atomic.Int64
	writerDone := make(chan error, 1)
	go func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := range entries {
			if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: packedEntry(i*perEntry, perEntry)}).Err(); err != nil {
				writerDone <- err
				return
			}
			sent.Add(perEntry)
			<-tick.C
		}
		writerDone <- nil
	}()

	// Kill once the collector has counted a fair part, with more to come,
	// at a moment it has entries read but not acknowledged: stop it, look,
	// and kill it if so (its state at the kill is the state when stopped).
	// Serve reads a few entries at a time (collector.readPace apart) and
	// acknowledges them once applied, so the pending list is watched
	// closely and serve stopped the moment it is not empty.
	var lastScrape float64
	if !redistest.Poll(ctx, func() bool {
		if m, _, err := scrape(ctx, p1.url("/metrics")); err == nil {
			lastScrape = m.sum("lockscope_events_total")
		}
		return lastScrape >= written/4
	}) {
		t.Fatalf("serve counted %v events, never a quarter of %d", lastScrape, written)
	}
	// "More to come" is what serve has not counted yet, not what the writer
	// has not written: a serve slower than the writer (a loaded host, a
	// -race build) still has a backlog to read when the writer is done.
	caught := false
	for !caught && lastScrape < written && ctx.Err() == nil {
		if rdb.XPending(ctx, stream, group).Val().Count == 0 {
			if sent.Load() == written { // has serve counted everything?
				if m, _, err := scrape(ctx, p1.url("/metrics")); err == nil {
					lastScrape = m.sum("lockscope_events_total")
				}
			}
			time.Sleep(time.Millisecond)
			continue
		}
		m, _, err := scrape(ctx, p1.url("/metrics"))
		if err != nil {
			time.Sleep(time.Millisecond)
			continue
		}
		lastScrape = m.sum("lockscope_events_total")
		p1.cmd.Process.Signal(syscall.SIGSTOP)
		// Once every thread has stopped it writes nothing more, but a
		// command it wrote just before (an XACK) may not have been read by
		// Redis yet: it is readable already, so Redis has read it by the
		// time it answers the second of two round trips. Equal counts: no
		// such command.
		if err := waitStopped(p1.cmd.Process.Pid, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		n := rdb.XPending(ctx, stream, group).Val().Count
		caught = lastScrape < written && n > 0 && rdb.XPending(ctx, stream, group).Val().Count == n
		if !caught {
			p1.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	if !caught {
		t.Fatalf("serve counted %v events, never caught with unacknowledged entries mid-ingest", lastScrape)
	}
	p1.kill(t)
	sentAtKill := sent.Load()
	t.Logf("killed at %v", time.Since(start))

	// What the dead collector acknowledged: delivered (up to the group's
	// last-delivered ID) and not pending.
	groups, err := rdb.XInfoGroups(ctx, stream).Result()
	if err != nil || len(groups) != 1 {
		t.Fatalf("XINFO GROUPS = %v, %v", groups, err)
	}
	lastDelivered := groups[0].LastDeliveredID
	pend, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: 100000}).Result()
	if err != nil {
		t.Fatal(err)
	}
	pending := make(map[string]bool)
	for _, pe := range pend {
		pending[pe.ID] = true
	}
	delivered, err := rdb.XRange(ctx, stream, "-", lastDelivered).Result()
	if err != nil {
		t.Fatal(err)
	}
	var acked, pendingEvents int
	for _, m := range delivered {
		if pending[m.ID] {
			pendingEvents += entryEvents(t, m)
		} else {
			acked += entryEvents(t, m)
		}
	}
	if pendingEvents == 0 || pendingEvents != len(pend)*perEntry {
		t.Fatalf("pending entries %d, of which %d delivered: some pending entry is past the last delivered ID %s", len(pend), pendingEvents/perEntry, lastDelivered)
	}

	// The honest bound across processes: the killed one's last scrape can
	// include at most the pending events, which the new one counts again.
	if lastScrape > float64(acked+pendingEvents) {
		t.Errorf("killed serve's last scrape = %v, more than it read (%d acknowledged + %d pending)", lastScrape, acked, pendingEvents)
	}

	p2 := startServe(t, bin, srv.URL(), nil, "--group", group, "--consumer", "c1")
	if err := <-writerDone; err != nil {
		t.Fatalf("writer: %v", err)
	}
	want := float64(written - acked)
	var got float64
	if !redistest.Poll(ctx, func() bool {
		got = p2.metrics(ctx, t).sum("lockscope_events_total")
		return got >= want
	}) {
		t.Fatalf("restarted serve counted %v events, want %v (%d written - %d acknowledged by the killed one)", got, want, written, acked)
	}
	t.Logf("caught up at %v", time.Since(start))
	// A late double count would come from an entry not yet read or not yet
	// acknowledged (serve counts before it acknowledges): once the group has
	// every entry delivered and none pending, the count is final.
	lastID := func() string {
		if ms := rdb.XRevRangeN(ctx, stream, "+", "-", 1).Val(); len(ms) == 1 {
			return ms[0].ID
		}
		return ""
	}()
	if !redistest.Poll(ctx, func() bool {
		gs := rdb.XInfoGroups(ctx, stream).Val()
		return len(gs) == 1 && gs[0].LastDeliveredID == lastID && gs[0].Pending == 0
	}) {
		t.Fatalf("restarted serve never read and acknowledged the whole stream (to %s): %+v", lastID, rdb.XInfoGroups(ctx, stream).Val())
	}
	m := p2.metrics(ctx, t)
	if got := m.sum("lockscope_events_total"); got != want {
		t.Errorf("restarted serve: lockscope_events_total = %v, want exactly %v (%d written - %d acknowledged by the killed one)", got, want, written, acked)
	}
	if got := m.sum("lockscope_events_malformed_total") + m.sum("lockscope_stream_gap_entries_total"); got != 0 {
		t.Errorf("malformed + gap = %v, want 0", got)
	}
	if g := rdb.XInfoGroups(ctx, stream).Val(); len(g) != 1 || g[0].Pending != 0 || g[0].Lag != 0 {
		t.Errorf("group after catching up = %+v, want nothing pending, no lag", g)
	}
	resp, err := http.Get(p2.url("/readyz"))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz of the restarted serve = %v, %v; want 200", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}
	t.Logf("written %d; at the kill: %d sent, last scrape %v, acknowledged %d, applied-or-in-flight but unacknowledged %d (%d entries); restarted process counted %v",
		written, sentAtKill, lastScrape, acked, pendingEvents, len(pend), m.sum("lockscope_events_total"))
	p2.stop(t, 15*time.Second)
}

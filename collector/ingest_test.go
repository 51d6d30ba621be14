package collector

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector/promexport"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/internal/testkit/syncbuf"
)

// Test helpers shared by the collector's ingest and watch tests.

// testAgg returns an aggregator counting into the Prometheus export,
// registered on a fresh registry.
func testAgg(t *testing.T, cfg state.Config) (*state.Aggregator, *prometheus.Registry) {
	t.Helper()
	metrics := promexport.New()
	cfg.Metrics = metrics
	agg := state.New(cfg)
	reg := prometheus.NewRegistry()
	if err := metrics.Register(reg, agg); err != nil {
		t.Fatalf("Register: %v", err)
	}
	return agg, reg
}

// running is a Follower whose Run goroutine the test controls.
type running struct {
	*Follower
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// startFollower runs a Follower until stop or the end of the test, and
// checks that Run returns nil promptly.
func startFollower(t *testing.T, rdb redis.UniversalClient, agg *state.Aggregator, opt *Options) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Follower: New(rdb, agg, opt), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- r.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Run() = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return within 10s of cancel")
		}
	})
}

// waitLimit bounds the collector tests' waits (redistest.WaitFor): long,
// because the suite runs under -race on shared cores.
const waitLimit = 15 * time.Second

// metric sums the values of the series of name whose labels include want
// (label, value pairs).
func metric(t *testing.T, reg prometheus.Gatherer, name string, want ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(want); i += 2 {
				if !hasLabel(m, want[i], want[i+1]) {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Untyped != nil:
				sum += m.Untyped.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// logBuffer collects a Follower's log lines.
type logBuffer struct{ syncbuf.Buffer }

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lines returns the log lines containing s.
func (b *logBuffer) lines(s string) []string {
	var out []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// lockEvents returns rounds acquire/release pairs on each of keys, in time order.
func lockEvents(keys []string, rounds int, t0 time.Time) []event.Event {
	var evs []event.Event
	ts := t0.UnixNano()
	for r := 0; r < rounds; r++ {
		for _, k := range keys {
			ts += int64(time.Microsecond)
			evs = append(evs, event.Event{Type: event.Acquired, Key: k, Owner: "app/host/1", Lease: fmt.Sprintf("%016x", ts), TS: ts, Wait: time.Millisecond, TTL: 10 * time.Second, Attempts: 1})
			ts += int64(time.Microsecond)
			evs = append(evs, event.Event{Type: event.Released, Key: k, Owner: "app/host/1", Lease: fmt.Sprintf("%016x", ts-int64(time.Microsecond)), TS: ts, Hold: time.Microsecond})
		}
	}
	return evs
}

func keyList(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + "k" + strconv.Itoa(i)
	}
	return keys
}

func xaddPacked(t *testing.T, rdb redis.UniversalClient, stream string, evs []event.Event) {
	t.Helper()
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: event.PackedFields(len(evs), event.Pack(evs))}).Err(); err != nil {
		t.Fatalf("XADD packed: %v", err)
	}
}

func xaddSingle(t *testing.T, rdb redis.UniversalClient, stream string, evs ...event.Event) {
	t.Helper()
	for i := range evs {
		if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: event.AppendFields(nil, &evs[i])}).Err(); err != nil {
			t.Fatalf("XADD single: %v", err)
		}
	}
}

func xaddRaw(t *testing.T, rdb redis.UniversalClient, stream string, values ...any) {
	t.Helper()
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: values}).Err(); err != nil {
		t.Fatalf("XADD %v: %v", values, err)
	}
}

// pendingCount is the group's number of unacknowledged entries.
func pendingCount(t *testing.T, rdb redis.UniversalClient, stream, group string) int64 {
	t.Helper()
	p, err := rdb.XPending(context.Background(), stream, group).Result()
	if err != nil {
		t.Fatalf("XPENDING: %v", err)
	}
	return p.Count
}

func eventsTotal(agg *state.Aggregator) int64 { return agg.Overview().EventsTotal }

func TestIngestPackedAndSingleEntries(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	t0 := time.Now()

	// Written before any collector exists: the group starts Backfill ago
	// and must still count them.
	keys := keyList(prefix+"job:", 15)
	packed := lockEvents(keys, 20, t0) // 600 events
	xaddPacked(t, rdb, stream, packed[:300])
	xaddPacked(t, rdb, stream, packed[300:])
	single := lockEvents([]string{prefix + "single"}, 10, t0.Add(time.Second)) // 20 events, one per entry
	xaddSingle(t, rdb, stream, single...)

	agg, reg := testAgg(t, state.Config{})
	r := startFollower(t, rdb, agg, &Options{Stream: stream})
	const total = 620
	redistest.WaitFor(t, waitLimit, "620 events applied", func() bool { return eventsTotal(agg) >= total })
	redistest.WaitFor(t, waitLimit, "ready", func() bool { return agg.Health() == nil })
	redistest.WaitFor(t, waitLimit, "all entries acknowledged", func() bool { return pendingCount(t, rdb, stream, r.opt.Group) == 0 })

	if got := eventsTotal(agg); got != total {
		t.Errorf("Overview().EventsTotal = %d, want %d", got, total)
	}
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"lockscope_events_total", []string{"type", "acquired"}, 310},
		{"lockscope_events_total", []string{"type", "released"}, 310},
		{"lockscope_acquisitions_total", nil, 310},
		{"lockscope_releases_total", []string{"outcome", "released"}, 310},
		{"lockscope_events_malformed_total", nil, 0},
		{"lockscope_held_locks", nil, 0},
	}
	for _, c := range checks {
		if got := metric(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	d, ok := agg.Lock(keys[3])
	if !ok || d.Acquisitions != 20 || d.Held {
		t.Errorf("Lock(%q) = {Acquisitions:%d Held:%v}, %v; want {Acquisitions:20 Held:false}, true", keys[3], d.Acquisitions, d.Held, ok)
	}
	d, ok = agg.Lock(prefix + "single")
	if !ok || d.Acquisitions != 10 {
		t.Errorf("Lock(single).Acquisitions = %d, %v; want 10, true", d.Acquisitions, ok)
	}
	if err := agg.Health(); err != nil {
		t.Errorf("Health() = %v, want nil", err)
	}
}

// TestIngestAppliesLongReadsInPieces: a read of more events than
// decodeAhead is applied a few entries at a time, through the group and in a
// replica's replay alike. Every hold's acquisition ends one entry and its
// release starts the next, so an event lost, applied twice or out of order
// where a piece ends shows as a hold left open, a not_owner release or a
// wrong count.
func TestIngestAppliesLongReadsInPieces(t *testing.T) {
	for _, replica := range []bool{false, true} {
		// A shared group reads the backlog through XREADGROUP; a replica
		// (the default) replays it first.
		name := "group"
		if replica {
			name = "replica"
		}
		t.Run(name, func(t *testing.T) {
			srv := redistest.Shared(t)
			rdb := srv.Client(t)
			prefix := redistest.KeyPrefix(t)
			stream := prefix + "events"
			keys := keyList(prefix+"order:", 1000)
			evs := lockEvents(keys, 6, time.Now().Add(-time.Minute)) // 12 000 events
			const per = 1499                                         // odd: each entry ends with an acquisition
			entries := 0
			for i := 0; i < len(evs); i += per {
				xaddPacked(t, rdb, stream, evs[i:min(i+per, len(evs))])
				entries++
			}
			if n := len(evs); n <= 2*decodeAhead || entries > DefaultCount {
				t.Fatalf("%d events in %d entries: want more than %d, in one read", n, entries, 2*decodeAhead)
			}

			agg, reg := testAgg(t, state.Config{})
			opt := &Options{Stream: stream, Group: prefix + "g"}
			if replica {
				opt.Group = ""
			}
			r := startFollower(t, rdb, agg, opt)
			redistest.WaitFor(t, waitLimit, "every event applied", func() bool { return eventsTotal(agg) >= int64(len(evs)) })
			redistest.WaitFor(t, waitLimit, "ready", func() bool { return agg.Health() == nil })
			if !replica {
				redistest.WaitFor(t, waitLimit, "all entries acknowledged", func() bool { return pendingCount(t, rdb, stream, r.opt.Group) == 0 })
			}
			if got := eventsTotal(agg); got != int64(len(evs)) {
				t.Errorf("Overview().EventsTotal = %d, want %d", got, len(evs))
			}
			pairs := float64(len(evs) / 2)
			for _, c := range []struct {
				name   string
				labels []string
				want   float64
			}{
				{"lockscope_acquisitions_total", nil, pairs},
				{"lockscope_releases_total", []string{"outcome", "released"}, pairs},
				{"lockscope_releases_total", []string{"outcome", event.ReasonNotOwner}, 0},
				{"lockscope_held_locks", nil, 0},
				{"lockscope_expirations_total", nil, 0},
			} {
				if got := metric(t, reg, c.name, c.labels...); got != c.want {
					t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
				}
			}
			for _, k := range []string{keys[0], keys[499], keys[999]} {
				if d, ok := agg.Lock(k); !ok || d.Acquisitions != 6 || d.Held {
					t.Errorf("Lock(%q) = {Acquisitions:%d Held:%v}, %v; want {Acquisitions:6 Held:false}, true", k, d.Acquisitions, d.Held, ok)
				}
			}
		})
	}
}

func TestIngestBackfillNegativeStartsAtEnd(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	xaddPacked(t, rdb, stream, lockEvents([]string{prefix + "old"}, 5, time.Now()))

	agg, _ := testAgg(t, state.Config{})
	startFollower(t, rdb, agg, &Options{Stream: stream, Backfill: -1})
	redistest.WaitFor(t, waitLimit, "group created", func() bool {
		g, err := rdb.XInfoGroups(context.Background(), stream).Result()
		return err == nil && len(g) == 1
	})
	xaddPacked(t, rdb, stream, lockEvents([]string{prefix + "new"}, 2, time.Now()))
	// Entries are applied in ID order: had the old batch been read, the
	// count would pass 4 on its way to 14.
	redistest.WaitFor(t, waitLimit, "new events applied", func() bool { return eventsTotal(agg) >= 4 })
	if got := eventsTotal(agg); got != 4 {
		t.Errorf("EventsTotal = %d, want 4 (events written before the group existed skipped)", got)
	}
}

func TestIngestMalformedEntriesCountedAckedSkipped(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	now := time.Now()

	good := lockEvents([]string{prefix + "a"}, 5, now) // 10 events
	xaddPacked(t, rdb, stream, good)
	xaddRaw(t, rdb, stream, "type", "acquired", "key", "k", "ts", "1")            // no version
	xaddRaw(t, rdb, stream, "v", "99", "type", "acquired", "key", "k", "ts", "1") // unknown version
	batch := event.Pack(good)
	xaddRaw(t, rdb, stream, "v", "1", "n", "10", "batch", batch[:len(batch)-7])                // truncated batch
	xaddRaw(t, rdb, stream, "v", "1", "n", strconv.Itoa(event.MaxBatchEvents+1), "batch", "x") // too many events
	huge := event.Event{Type: event.Acquired, Key: strings.Repeat("k", event.MaxStringLen+1), TS: 1}
	xaddSingle(t, rdb, stream, huge)                                                         // key too large
	xaddRaw(t, rdb, stream, "foo", "bar")                                                    // not an event at all
	xaddRaw(t, rdb, stream, "v", "1", "n", "1", "batch", strings.Repeat("x", maxEntryBytes)) // larger than any that decodes: never read whole
	last := event.Event{Type: event.Acquired, Key: prefix + "b", Owner: "o", TS: now.Add(time.Second).UnixNano(), TTL: time.Minute, Attempts: 1}
	xaddSingle(t, rdb, stream, last)
	const bad, goodEvents = 7, 11

	var logs logBuffer
	agg, reg := testAgg(t, state.Config{})
	r := startFollower(t, rdb, agg, &Options{Stream: stream, Group: DefaultGroup, Logger: logs.logger()})
	redistest.WaitFor(t, waitLimit, "good events applied", func() bool { return eventsTotal(agg) >= goodEvents })
	redistest.WaitFor(t, waitLimit, "malformed entries counted", func() bool { return agg.Overview().Malformed >= bad })
	redistest.WaitFor(t, waitLimit, "all entries acknowledged", func() bool { return pendingCount(t, rdb, stream, DefaultGroup) == 0 })

	if got := eventsTotal(agg); got != goodEvents {
		t.Errorf("EventsTotal = %d, want %d", got, goodEvents)
	}
	if got := agg.Overview().Malformed; got != bad {
		t.Errorf("Overview().Malformed = %d, want %d", got, bad)
	}
	if got := metric(t, reg, "lockscope_events_malformed_total"); got != bad {
		t.Errorf("lockscope_events_malformed_total = %v, want %d", got, bad)
	}
	if d, ok := agg.Lock(prefix + "b"); !ok || !d.Held || d.Owner != "o" {
		t.Errorf("Lock(b) = {Held:%v Owner:%q}, %v; want the holder after the garbage, true", d.Held, d.Owner, ok)
	}
	// Rate limited: the first bad entry is logged at once, the rest
	// within 10s are folded into one count logged at the latest on exit.
	if got := len(logs.lines("skipped malformed")); got != 1 {
		t.Errorf("malformed log lines while running = %d, want 1:\n%s", got, logs.String())
	}
	r.stop(t)
	lines := logs.lines("skipped malformed")
	sum := 0
	for _, l := range lines {
		m := regexp.MustCompile(`count=(\d+)`).FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("log line without count: %s", l)
		}
		n, _ := strconv.Atoi(m[1])
		sum += n
	}
	if len(lines) != 2 || sum != bad {
		t.Errorf("malformed log lines = %d with counts summing to %d, want 2 lines summing to %d:\n%s", len(lines), sum, bad, strings.Join(lines, "\n"))
	}
}

func TestIngestReplacementClaimsDeadConsumer(t *testing.T) {
	for _, sameName := range []bool{false, true} {
		t.Run(fmt.Sprintf("sameName=%v", sameName), func(t *testing.T) {
			srv := redistest.Shared(t)
			rdb := srv.Client(t)
			ctx := context.Background()
			prefix := redistest.KeyPrefix(t)
			stream := prefix + "events"
			if err := rdb.XGroupCreateMkStream(ctx, stream, DefaultGroup, "0").Err(); err != nil {
				t.Fatal(err)
			}
			keys := keyList(prefix, 4)
			for i := 0; i < 6; i++ {
				xaddPacked(t, rdb, stream, lockEvents(keys, 10, time.Now())) // 80 events each
			}
			// The dead collector read three entries and was killed before
			// acknowledging them.
			dead := "dead"
			consumer := "replacement"
			if sameName {
				consumer = dead
			}
			read, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: DefaultGroup, Consumer: dead, Streams: []string{stream, ">"}, Count: 3, Block: -1}).Result()
			if err != nil || len(read) != 1 || len(read[0].Messages) != 3 {
				t.Fatalf("XREADGROUP as dead = %v, %v; want 3 entries", read, err)
			}
			for i := 0; i < 4; i++ {
				xaddPacked(t, rdb, stream, lockEvents(keys, 10, time.Now()))
			}
			const total = 10 * 80

			agg, reg := testAgg(t, state.Config{})
			startFollower(t, rdb, agg, &Options{Stream: stream, Group: DefaultGroup, Consumer: consumer, ClaimMinIdle: 20 * time.Millisecond})
			redistest.WaitFor(t, waitLimit, "every event applied", func() bool { return eventsTotal(agg) >= total })
			// Once nothing is pending, nothing can be delivered again.
			redistest.WaitFor(t, waitLimit, "nothing pending", func() bool { return pendingCount(t, rdb, stream, DefaultGroup) == 0 })
			if got := eventsTotal(agg); got != total {
				t.Errorf("EventsTotal = %d, want %d (each event exactly once)", got, total)
			}
			if got := metric(t, reg, "lockscope_acquisitions_total"); got != total/2 {
				t.Errorf("lockscope_acquisitions_total = %v, want %d", got, total/2)
			}
		})
	}
}

func TestIngestRedisRestartRecovers(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	keys := keyList(prefix, 5)
	for i := 0; i < 3; i++ {
		xaddPacked(t, rdb, stream, lockEvents(keys, 10, time.Now())) // 100 events
	}
	agg, _ := testAgg(t, state.Config{})
	r := startFollower(t, rdb, agg, &Options{Stream: stream})
	redistest.WaitFor(t, waitLimit, "300 events applied", func() bool { return eventsTotal(agg) >= 300 })
	redistest.WaitFor(t, waitLimit, "ready", func() bool { return agg.Health() == nil })

	srv.Stop()
	redistest.WaitFor(t, waitLimit, "not ready", func() bool { return agg.Health() != nil })
	if err := agg.Health(); !strings.Contains(err.Error(), "Redis unreachable") {
		t.Errorf("Health() = %q, want it to say Redis is unreachable", err)
	}
	if got := eventsTotal(agg); got != 300 {
		t.Errorf("EventsTotal while Redis is down = %d, want the last state, 300", got)
	}

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// go-redis' pool answers its last dial error until its background
	// redial (once a second) succeeds: wait for it, as emitters retry.
	redistest.WaitFor(t, waitLimit, "client reconnected", func() bool { return rdb.Ping(context.Background()).Err() == nil })
	// The restarted server lost everything: the emitters recreate the
	// stream, the collector its group.
	for i := 0; i < 2; i++ {
		xaddPacked(t, rdb, stream, lockEvents(keys, 10, time.Now()))
	}
	redistest.WaitFor(t, waitLimit, "events after the restart applied", func() bool { return eventsTotal(agg) >= 500 })
	redistest.WaitFor(t, waitLimit, "ready again", func() bool { return agg.Health() == nil })
	if got := eventsTotal(agg); got != 500 {
		t.Errorf("EventsTotal = %d, want 500", got)
	}
	g, err := rdb.XInfoGroups(context.Background(), stream).Result()
	if err != nil || len(g) != 1 || g[0].Name != r.opt.Group {
		t.Errorf("XINFO GROUPS after restart = %+v, %v; want the group recreated", g, err)
	}
}

func TestIngestStreamTrimmedUnderLaggingGroup(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	ev := func(i int) event.Event {
		return event.Event{Type: event.Acquired, Key: prefix + "k" + strconv.Itoa(i), Owner: "o", TS: time.Now().UnixNano(), TTL: time.Minute, Attempts: 1}
	}
	for i := 0; i < 5; i++ {
		xaddSingle(t, rdb, stream, ev(i))
	}
	first, _ := testAgg(t, state.Config{})
	r := startFollower(t, rdb, first, &Options{Stream: stream})
	redistest.WaitFor(t, waitLimit, "first collector read 5", func() bool { return eventsTotal(first) == 5 })
	// The 5 are applied by the start-up replay, before the group exists:
	// stop only once the group records what was read.
	redistest.WaitFor(t, waitLimit, "first collector's group created", func() bool {
		g, err := rdb.XInfoGroups(ctx, stream).Result()
		return err == nil && len(g) == 1
	})
	r.stop(t)

	// While no collector runs, 10 entries are written and trimmed away.
	for i := 5; i < 15; i++ {
		xaddSingle(t, rdb, stream, ev(i))
	}
	if err := rdb.XTrimMaxLen(ctx, stream, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 15; i < 18; i++ {
		xaddSingle(t, rdb, stream, ev(i))
	}

	var logs logBuffer
	agg, reg := testAgg(t, state.Config{})
	startFollower(t, rdb, agg, &Options{Stream: stream, Logger: logs.logger()})
	redistest.WaitFor(t, waitLimit, "3 events after the gap applied", func() bool { return eventsTotal(agg) >= 3 })
	redistest.WaitFor(t, waitLimit, "gap reported", func() bool { return metric(t, reg, "lockscope_stream_gap_entries_total") > 0 })
	if got := metric(t, reg, "lockscope_stream_gap_entries_total"); got != 10 {
		t.Errorf("lockscope_stream_gap_entries_total = %v, want 10", got)
	}
	if l := logs.lines("stream trimmed"); len(l) != 1 || !strings.Contains(l[0], "missing=10") {
		t.Errorf("gap log lines = %q, want one with missing=10", l)
	}
	// Redis 7.0 keeps counting trimmed entries as lag; the exported lag
	// must not.
	redistest.WaitFor(t, waitLimit, "lag back to 0", func() bool {
		return metric(t, reg, "lockscope_stream_lag_entries") == 0 && metric(t, reg, "lockscope_stream_pending_entries") == 0
	})
	if got := eventsTotal(agg); got != 3 {
		t.Errorf("EventsTotal = %d, want 3", got)
	}
}

func TestIngestPendingEntriesTrimmedAreAGap(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	if err := rdb.XGroupCreateMkStream(ctx, stream, DefaultGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		xaddPacked(t, rdb, stream, lockEvents([]string{prefix + "a"}, 1, time.Now()))
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: DefaultGroup, Consumer: "dead", Streams: []string{stream, ">"}, Count: 4, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XTrimMaxLen(ctx, stream, 0).Err(); err != nil {
		t.Fatal(err)
	}
	xaddPacked(t, rdb, stream, lockEvents([]string{prefix + "b"}, 1, time.Now()))

	agg, reg := testAgg(t, state.Config{})
	startFollower(t, rdb, agg, &Options{Stream: stream, Group: DefaultGroup, ClaimMinIdle: time.Millisecond})
	redistest.WaitFor(t, waitLimit, "gap of the dead consumer's trimmed entries", func() bool { return metric(t, reg, "lockscope_stream_gap_entries_total") >= 4 })
	redistest.WaitFor(t, waitLimit, "new entry applied", func() bool { return eventsTotal(agg) >= 2 })
	redistest.WaitFor(t, waitLimit, "nothing pending", func() bool { return pendingCount(t, rdb, stream, DefaultGroup) == 0 })
	if got := metric(t, reg, "lockscope_stream_gap_entries_total"); got != 4 {
		t.Errorf("lockscope_stream_gap_entries_total = %v, want 4", got)
	}
	if got := eventsTotal(agg); got != 2 {
		t.Errorf("EventsTotal = %d, want 2", got)
	}
}

func TestGapTracker(t *testing.T) {
	// Snapshots as Redis 7.0 reports them (entries-read never repaired) and
	// as later versions do (repaired when the group reads past the gap).
	type step struct {
		s           streamInfo
		g           groupInfo
		wantMissing int64
		wantLag     int64
	}
	si := func(added, length int64, first, last string) streamInfo {
		return streamInfo{length: length, entriesAdded: added, hasCounters: true, firstID: first, lastGenerated: last}
	}
	gi := func(read int64, delivered string, lag int64) groupInfo {
		return groupInfo{entriesRead: read, entriesReadValid: true, lastDelivered: delivered, lag: lag, lagValid: true}
	}
	tests := map[string][]step{
		"redis 7.0": {
			{si(5, 5, "1-0", "5-0"), gi(5, "5-0", 0), 0, 0},
			{si(18, 3, "16-0", "18-0"), gi(5, "5-0", 13), 10, 3}, // 10 trimmed unread
			{si(18, 3, "16-0", "18-0"), gi(5, "5-0", 13), 0, 3},  // reported once
			{si(18, 3, "16-0", "18-0"), gi(6, "16-0", 12), 0, 2},
			{si(18, 3, "16-0", "18-0"), gi(8, "18-0", 10), 0, 0}, // caught up: lag excludes the gap
			{si(20, 5, "16-0", "20-0"), gi(8, "18-0", 12), 0, 2},
			{si(30, 2, "29-0", "30-0"), gi(10, "20-0", 20), 8, 2}, // a second gap of 8
		},
		"repaired": {
			{si(18, 3, "16-0", "18-0"), gi(5, "5-0", 13), 10, 3},
			{si(18, 3, "16-0", "18-0"), gi(16, "16-0", 2), 0, 2}, // R repaired to the position
			{si(18, 3, "16-0", "18-0"), gi(18, "18-0", 0), 0, 0},
			{si(30, 2, "29-0", "30-0"), gi(18, "18-0", 12), 10, 2},
		},
		"read past between polls (7.0)": {
			{si(5, 5, "1-0", "5-0"), gi(5, "5-0", 0), 0, 0},
			{si(18, 3, "16-0", "18-0"), gi(8, "18-0", 10), 10, 0},
		},
		"no counters (miniredis)": {
			{streamInfo{length: 9, lastGenerated: "9-0"}, groupInfo{lastDelivered: "9-0", lag: 9, lagValid: true}, 0, 0},
			{streamInfo{length: 12, lastGenerated: "12-0"}, groupInfo{lastDelivered: "9-0", lag: 12, lagValid: true}, 0, 0},
		},
	}
	for name, steps := range tests {
		t.Run(name, func(t *testing.T) {
			var tr gapTracker
			for i, st := range steps {
				missing, lag := tr.update(0, &st.s, st.g)
				if missing != st.wantMissing || lag != st.wantLag {
					t.Errorf("step %d: update() = %d missing, lag %d; want %d, %d", i, missing, lag, st.wantMissing, st.wantLag)
				}
			}
		})
	}
}

// With a tiny ClaimMinIdle, XAUTOCLAIM hands this consumer its own entries
// that are still being applied: they must not be applied twice.
func TestIngestClaimNeverReappliesOwnEntries(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	agg, _ := testAgg(t, state.Config{})
	startFollower(t, rdb, agg, &Options{Stream: stream, Group: DefaultGroup, Count: 1, ClaimMinIdle: time.Millisecond})
	// Entries big enough that the applier is the bottleneck: one is
	// always in flight when the claim runs.
	keys := keyList(prefix, 50)
	const entries, per = 100, 500
	for i := 0; i < entries; i++ {
		xaddPacked(t, rdb, stream, lockEvents(keys, 5, time.Now()))
	}
	redistest.WaitFor(t, waitLimit, "every event applied", func() bool { return eventsTotal(agg) >= entries*per })
	redistest.WaitFor(t, waitLimit, "nothing pending", func() bool { return pendingCount(t, rdb, stream, DefaultGroup) == 0 })
	if got := eventsTotal(agg); got != entries*per {
		t.Errorf("EventsTotal = %d, want %d", got, entries*per)
	}
}

func TestIngestForgetsStaleConsumers(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	if err := rdb.XGroupCreateMkStream(ctx, stream, DefaultGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gone-idle", "gone-pending"} {
		if err := rdb.XGroupCreateConsumer(ctx, stream, DefaultGroup, name).Err(); err != nil {
			t.Fatal(err)
		}
	}
	xaddPacked(t, rdb, stream, lockEvents([]string{prefix + "a"}, 1, time.Now()))
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: DefaultGroup, Consumer: "gone-pending", Streams: []string{stream, ">"}, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	c := New(rdb, state.New(state.Config{}), &Options{Stream: stream, Group: DefaultGroup, Consumer: "me"})
	names := func() []string {
		cs, err := rdb.XInfoConsumers(ctx, stream, DefaultGroup).Result()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range cs {
			out = append(out, x.Name)
		}
		return out
	}
	c.forgetStaleConsumers(ctx)
	if got := names(); !slices.Equal(got, []string{"gone-idle", "gone-pending"}) {
		t.Errorf("consumers after a check with none idle for an hour = %q, want both kept", got)
	}
	// An hour of idleness without waiting an hour.
	c.staleAfter = 0
	c.forgetStaleConsumers(ctx)
	if got := names(); !slices.Equal(got, []string{"gone-pending"}) {
		t.Errorf("consumers after the check = %q, want only the one with a pending entry kept", got)
	}
}

// A refusal names its cause: an ACL (grant the permission) or a key holding
// another type (WRONGTYPE: not an ACL matter).
func TestRemedyNamesTheCause(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	rdb.Set(ctx, "not-a-stream", "v", 0)
	err := rdb.XInfoStream(ctx, "not-a-stream").Err()
	if got := remedy(err, "+xinfo"); !strings.Contains(got, "another type") || strings.Contains(got, "grant") {
		t.Errorf("remedy(%v) = %q, want the key's type named, not the ACL", err, got)
	}
	rdb.Do(ctx, "ACL", "SETUSER", "weak", "on", ">pw", "~*", "+@all", "-xinfo")
	weak := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "weak", Password: "pw"})
	defer weak.Close()
	err = weak.XInfoStream(ctx, "not-a-stream").Err()
	if got := remedy(err, "+xinfo"); got != "grant +xinfo to the collector's Redis user" {
		t.Errorf("remedy(%v) = %q, want the grant", err, got)
	}
}

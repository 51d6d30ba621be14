package reliability

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// soakConfig is the soak's shape. The suite runs a short version; the
// documented run (BENCHMARKS.md, "Soak") sets the environment:
//
//	LOCKSCOPE_SOAK_DURATION=10m LOCKSCOPE_SOAK_RATE=34000 LOCKSCOPE_SOAK_MAX_KEYS=200000 \
//	  go test -run '^TestSoak$' -v -timeout 20m ./test/reliability/
type soakConfig struct {
	duration    time.Duration // of the measured part, after the warm-up
	rate        int           // lock attempts per second asked of lockscope load
	concurrency int
	maxKeys     int // serve --max-keys: the key table fills within the warm-up
	every       time.Duration
	gogc        string // serve's GOGC: the suite collects often to get many live-heap readings
}

func soakFromEnv(t *testing.T) soakConfig {
	c := soakConfig{duration: 30 * time.Second, rate: 8000, concurrency: 1000, maxKeys: 10000, every: time.Second, gogc: "25"}
	if v := os.Getenv("LOCKSCOPE_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LOCKSCOPE_SOAK_DURATION: %v", err)
		}
		c.duration, c.every, c.gogc = d, max(time.Second, d/60), os.Getenv("LOCKSCOPE_SOAK_GOGC")
	}
	for env, p := range map[string]*int{"LOCKSCOPE_SOAK_RATE": &c.rate, "LOCKSCOPE_SOAK_CONCURRENCY": &c.concurrency, "LOCKSCOPE_SOAK_MAX_KEYS": &c.maxKeys} {
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s: %v", env, err)
			}
			*p = n
		}
	}
	return c
}

type soakSample struct {
	at              time.Duration
	lastGC          float64 // unix seconds of the last GC
	events          float64
	heap, goal, rss float64
	lag, goroutines float64
	holds           float64 // lockscope_lock_order_holds
}

// TestSoak runs `lockscope load` (payments: every order is a new key, so the
// collector's key table fills and must evict) against `lockscope serve` and
// samples serve's heap and RSS from its /metrics. After a warm-up that fills
// the key table and the lock-order holds, memory must stay flat: the last third of the samples may
// not exceed the first third by more than a tolerance, and what more
// lock-order holds take (they follow the acquisition rate, up to their own
// bound). Every event the load sent must be counted, exactly.
func TestSoak(t *testing.T) {
	t.Parallel()
	cfg := soakFromEnv(t)
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{Notify: "none"})
	ctx := testCtx(t, cfg.duration+6*time.Minute) // the warm-up, at most 3 minutes, and the load's end
	var env []string
	if cfg.gogc != "" {
		env = append(env, "GOGC="+cfg.gogc)
	}
	serve := startServe(t, bin, srv.URL(), env, "--consumer", "soak", "--max-keys", strconv.Itoa(cfg.maxKeys))
	// The load runs until the test stops it (SIGINT: it releases what it
	// holds, flushes its events and prints its totals), at the latest
	// after the longest warm-up and the measured part.
	const warmLimit = 3 * time.Minute
	load := startLockscope(t, bin, nil, "load", "--redis", srv.URL(), "--scenarios", "payments",
		"--rate", strconv.Itoa(cfg.rate), "--concurrency", strconv.Itoa(cfg.concurrency),
		"--duration", (warmLimit + cfg.duration + time.Minute).String(), "--report-every", "0", "--log-level", "warn")

	// The warm-up lasts until every table the load fills is at its steady
	// size: the key table at --max-keys (payments make a new key per
	// order, so it must evict), and the lock-order graph's holds (each
	// acquisition's, kept until 30 s after its end and pruned every 10 s)
	// pruned by age once after their peak, or at their bound. The key
	// table is full within seconds. At this rate (some 4 000 acquisitions
	// a second) the holds reach their bound some 30 s in, and from then on
	// each is forgotten at its end (room is short): a few hundred, held
	// now. At a lower rate they level off below it. The hot-key minute
	// buckets keep growing, within their bound, for an hour: about 0.3 MB a
	// minute at most.
	start := time.Now()
	var keys, holds, peakHolds float64
	redistest.WaitFor(t, warmLimit, "the key table full and the lock-order holds at their steady size", func() error {
		m, _, err := scrape(ctx, serve.url("/metrics"))
		if err != nil {
			return err
		}
		keys, holds = m.sum("lockscope_tracked_keys"), m.sum("lockscope_lock_order_holds")
		peakHolds = max(peakHolds, holds)
		if keys >= 0.99*float64(cfg.maxKeys) && (holds >= 0.99*(1<<17) || holds < 0.95*peakHolds) {
			return nil
		}
		return fmt.Errorf("tracked keys %.0f of %d, lock-order holds %.0f (peak %.0f)", keys, cfg.maxKeys, holds, peakHolds)
	})
	warm := time.Since(start)
	t.Logf("warm after %v: tracked keys %.0f, lock-order holds %.0f (peak %.0f)", warm.Round(time.Second), keys, holds, peakHolds)
	warmEnd := float64(time.Now().UnixNano()) / 1e9
	var samples []soakSample
	next := time.Now()
	for time.Since(start) < warm+cfg.duration && ctx.Err() == nil {
		m, _, err := scrape(ctx, serve.url("/metrics"))
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		samples = append(samples, soakSample{
			at: time.Since(start), events: m.sum("lockscope_events_total"), lastGC: m.sum("go_memstats_last_gc_time_seconds"),
			heap: m.sum("go_memstats_heap_inuse_bytes"), goal: m.sum("go_memstats_next_gc_bytes"),
			rss: m.sum("process_resident_memory_bytes"),
			lag: m.sum("lockscope_stream_lag_entries"), goroutines: m.sum("go_goroutines"),
			holds: m.sum("lockscope_lock_order_holds"),
		})
		next = next.Add(cfg.every)
		redistest.Sleep(ctx, time.Until(next))
	}
	if err := load.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatalf("SIGINT to lockscope load: %v", err)
	}
	select {
	case <-load.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("lockscope load did not finish 30s after its SIGINT")
	}
	if !load.cmd.ProcessState.Success() {
		t.Fatalf("lockscope load: %v\n%s", load.cmd.ProcessState, tail(load.out.String(), 2000))
	}
	sent, dropped := loadSent(t, load.out.String())

	// Every event sent is counted, once; the emitter's own dropped reports
	// are events too (type dropped) and carry exactly the drops.
	counted := func() float64 {
		m := serve.metrics(ctx, t)
		return m.sum("lockscope_events_total") - m.sum("lockscope_events_total", "type", "dropped")
	}
	var got float64
	if !redistest.Poll(testCtx(t, 60*time.Second), func() bool { got = counted(); return got >= float64(sent) }) {
		t.Errorf("serve counted %v events, want the %d load sent", got, sent)
	}
	redistest.Sleep(ctx, time.Second)
	if got = counted(); got != float64(sent) {
		t.Errorf("serve counted %v events (dropped reports aside), want exactly the %d load sent", got, sent)
	}
	if got := serve.metrics(ctx, t).sum("lockscope_events_dropped_total"); got != float64(dropped) {
		t.Errorf("lockscope_events_dropped_total = %v, want the %d load dropped", got, dropped)
	}

	if len(samples) < 9 {
		t.Fatalf("%d samples, want >= 9", len(samples))
	}
	third := len(samples) / 3
	first, last := samples[:third], samples[len(samples)-third:]
	rate := (samples[len(samples)-1].events - samples[0].events) / (samples[len(samples)-1].at - samples[0].at).Seconds()
	var table strings.Builder
	fmt.Fprintf(&table, "| t (s) | events counted | heap in use (MiB) | GC goal (MiB) | RSS (MiB) | lag (entries) | goroutines | lock-order holds |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, s := range samples {
		if len(samples) > 30 && i%(len(samples)/20) != 0 && i != len(samples)-1 {
			continue
		}
		fmt.Fprintf(&table, "| %.0f | %.0f | %.1f | %.1f | %.1f | %.0f | %.0f | %.0f |\n", s.at.Seconds(), s.events, s.heap/(1<<20), s.goal/(1<<20), s.rss/(1<<20), s.lag, s.goroutines, s.holds)
	}
	t.Logf("soak: rate asked %d attempts/s, %d clients, max-keys %d, GOGC %q, warm-up %v, measured %v; events sent %d; counted %.0f events/s while sampled\n%s",
		cfg.rate, cfg.concurrency, cfg.maxKeys, cfg.gogc, warm, cfg.duration, sent, rate, table.String())

	// Flat. The live heap is read at each GC: the GC goal it sets
	// (go_memstats_next_gc_bytes) is the heap live after it times
	// 1+GOGC/100, steady until the next GC, unlike the sawtooth of heap in
	// use. The peak goal of the last third of the samples against the
	// first third's, and the same of RSS. Peaks, not medians: the
	// lock-order holds grow between two prunes (every 10 s) and drop at
	// each, a bounded sawtooth of some 25 % of their memory, and each third
	// of the measured part (30 s in the suite) spans one period of it. A
	// heap that grew with the keys seen (rate/2 new keys per second) fails
	// this within seconds; the tolerance absorbs the odd burst.
	peak := func(ss []soakSample, f func(soakSample) float64) float64 {
		m := 0.0
		for _, s := range ss {
			m = max(m, f(s))
		}
		return m
	}
	rss := func(s soakSample) float64 { return s.rss }
	goal := func(s soakSample) float64 {
		if s.lastGC > warmEnd {
			return s.goal
		}
		return 0 // set by a GC of the warm-up
	}
	gcs := map[float64]bool{}
	for _, s := range samples {
		if s.lastGC > warmEnd {
			gcs[s.lastGC] = true
		}
	}
	// The lock-order holds are bounded on their own (1<<17 of them, 16 MiB
	// of strings) and follow the rate of acquisitions over their last 40 s:
	// a load that runs faster after the warm-up (the cores another test
	// package was using freed) keeps more of them, up to that bound. Their
	// growth from the first third's peak to the last's, at holdBytes each
	// (the map slot, the struct, the lease and key strings: some 190 bytes),
	// is allowed the GC goal; any other growth is not.
	const holdBytes = 256
	gogc := 100.0
	if v, err := strconv.ParseFloat(cfg.gogc, 64); err == nil {
		gogc = v
	}
	holdsOf := func(s soakSample) float64 { return s.holds }
	holdsGrew := max(0, peak(last, holdsOf)-peak(first, holdsOf))
	allowed := holdsGrew * holdBytes * (1 + gogc/100)
	if g0, g1 := peak(first, goal), peak(last, goal); len(gcs) < 3 || g0 == 0 {
		t.Errorf("%d GCs after the warm-up (first third's peak goal %.1f MiB), want >= 3, one in the first third, to judge the live heap", len(gcs), g0/(1<<20))
	} else if g1 > g0*1.1+4<<20+allowed {
		t.Errorf("GC goal (live heap x %s) grew from a peak of %.1f MiB (first third, %d GCs in all) to %.1f MiB (last third), more than the %.1f MiB that %.0f more lock-order holds allow",
			cfg.gogc, g0/(1<<20), len(gcs), g1/(1<<20), allowed/(1<<20), holdsGrew)
	}
	if r0, r1 := peak(first, rss), peak(last, rss); r1 > r0*1.3+16<<20 {
		t.Errorf("RSS grew from a peak of %.1f MiB (first third) to %.1f MiB (last third)", r0/(1<<20), r1/(1<<20))
	}
	if g0, g1 := peak(first, func(s soakSample) float64 { return s.goroutines }), peak(last, func(s soakSample) float64 { return s.goroutines }); g1 > g0+20 {
		t.Errorf("goroutines grew from %v to %v", g0, g1)
	}
	serve.stop(t, 15*time.Second)
}

var sentRE = regexp.MustCompile(`events: recorded=(\d+) sent=(\d+) dropped=(\d+)`)

// loadSent returns the events lockscope load reports it sent and dropped.
func loadSent(t *testing.T, out string) (sent, dropped int) {
	t.Helper()
	m := sentRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("lockscope load printed no event totals:\n%s", tail(out, 2000))
	}
	sent, _ = strconv.Atoi(m[2])
	dropped, _ = strconv.Atoi(m[3])
	if dropped != 0 {
		t.Logf("lockscope load dropped %d events (emitter buffer full)", dropped)
	}
	return sent, dropped
}

package reliability

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// BenchmarkServeDrain measures the collector end to end the way an operator
// would see it: a stream pre-filled by the lock package's StreamSink with
// -drain-events events (1 M by default; acquired + released pairs, packed
// batches of 512), then the real `lockscope serve` binary started on it with
// a new group; timed from the process start until its /metrics counts every
// event.
// Reported: events/s (wall clock), serve's CPU time per event
// (user+system from /proc, start-up included) and its minor page faults:
// each is a page of memory touched for the first time, which the kernel
// maps and zeroes (some 13 µs a page on this project's VM, BENCHMARKS.md).
//
//	go test -run '^$' -bench BenchmarkServeDrain -benchtime 1x -count 5 ./test/reliability/
func BenchmarkServeDrain(b *testing.B) {
	forKeyCounts(b, func(b *testing.B, sb serveBench) {
		var elapsed time.Duration
		var cpu time.Duration
		var faults int64
		for i := 0; i < b.N; i++ {
			stream := "drain:" + strconv.Itoa(i)
			fillStream(sb.ctx, b, lock.NewStreamSink(sb.rdb, stream, -1), sb.keys, *drainN)
			start := time.Now()
			p := startServe(b, sb.bin, sb.srv.URL(), nil, "--stream", stream)
			var counted float64
			if !redistest.Poll(sb.ctx, func() bool {
				m, _, err := scrape(sb.ctx, p.url("/metrics"))
				if err == nil {
					counted = m.sum("lockscope_events_total")
				}
				return counted >= float64(*drainN)
			}) {
				b.Fatalf("serve counted %v of %d events", counted, *drainN)
			}
			elapsed += time.Since(start)
			st, err := readProcStat(p.cmd.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			cpu += st.cpu
			faults += st.minflt
			if counted != float64(*drainN) {
				b.Fatalf("serve counted %v events, want %d", counted, *drainN)
			}
			p.kill(b)
			sb.rdb.Del(sb.ctx, stream)
		}
		b.ReportMetric(float64(*drainN*b.N)/elapsed.Seconds(), "events/s")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(*drainN*b.N), "cpu-ns/event")
		b.ReportMetric(float64(faults)/float64(b.N), "page-faults")
	})
}

// serveBench is what a serve benchmark runs against at one key count: the
// binary, a Redis of its own with a client, and a context bounding the run.
type serveBench struct {
	keys int
	bin  string
	srv  *redistest.Server
	rdb  *redis.Client
	ctx  context.Context
}

// forKeyCounts runs f as a sub-benchmark over 10 000 and over 500 000
// distinct keys.
func forKeyCounts(b *testing.B, f func(b *testing.B, sb serveBench)) {
	// Whether the Go heap gets huge pages changes what new memory costs
	// serve by a third or more (BENCHMARKS.md, "Transparent huge pages"):
	// the host's setting goes with the figures, as a configuration line
	// ("thp: madvise") that benchstat keeps apart.
	if thp, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err == nil {
		if _, mode, ok := strings.Cut(string(thp), "["); ok {
			mode, _, _ = strings.Cut(mode, "]")
			fmt.Printf("thp: %s\n", mode)
		}
	}
	for _, keys := range []int{10_000, 500_000} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			srv := redistest.Start(b, redistest.Options{})
			f(b, serveBench{keys: keys, bin: redistest.Lockscope(b), srv: srv, rdb: srv.Client(b), ctx: testCtx(b, 10*time.Minute)})
		})
	}
}

const drainEvents = 1_000_000

// drainN is the backlog BenchmarkServeDrain drains. Over 500 000 keys a new
// serve fills its key table (200 000 keys) in the first 400 000 events and
// evicts a key per acquisition after that: a longer backlog weighs that
// start less.
var drainN = flag.Int("drain-events", drainEvents, "BenchmarkServeDrain: events in the backlog")

// fillStream writes n events: acquire and release of keys distinct keys in
// turn, timestamps over the last minute.
func fillStream(ctx context.Context, b *testing.B, s *lock.StreamSink, keys, n int) {
	b.Helper()
	batch := make([]event.Event, 0, 512)
	base := time.Now().Add(-time.Minute).UnixNano()
	step := int64(time.Minute) / int64(n)
	for i := 0; i < n; i += 2 {
		k := "order:" + strconv.Itoa(i/2%keys)
		lease := strconv.FormatInt(int64(i), 16)
		ts := base + int64(i)*step
		batch = append(batch,
			event.Event{Type: event.Acquired, Key: k, Owner: "api/host-1/42", Lease: lease, TS: ts, TTL: 30 * time.Second, Attempts: 1},
			event.Event{Type: event.Released, Key: k, Owner: "api/host-1/42", Lease: lease, TS: ts + step, Hold: time.Duration(step)})
		if len(batch) == cap(batch) {
			if err := s.Write(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := s.Write(ctx, batch); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkServeLive measures `lockscope serve` following a live stream, as
// it runs in production: events written as they happen, at liveRate events/s
// (acquire + release pairs of keys distinct keys in turn, each acquisition
// with the 200 µs wait an uncontended obtain reports, in packed batches of
// 512 as the Go emitter writes them), into the stream of a running serve.
// Serve is warmed up first by the same 1 M events twice, written as fast as
// it takes them and not measured, so that what is measured is a serve that
// has run for a while: its key table full (over 500 000 keys, more than
// --max-keys, every acquisition evicts a key), its per-key rings grown and
// its heap at the size it keeps.
// -live-cold measures a new serve instead, whose first 200 000 keys take
// memory the kernel has not mapped yet.
// Reported: serve's CPU time per event from the first measured write until
// its /metrics counts them all (issue 16's goal: at most 1 µs), lag-ms, the
// time from the last write until then (how far behind serve was), and
// serve's minor page faults meanwhile.
//
//	go test -run '^$' -bench BenchmarkServeLive -benchtime 1x -count 3 ./test/reliability/
func BenchmarkServeLive(b *testing.B) {
	forKeyCounts(b, func(b *testing.B, sb serveBench) {
		var cpu, lag time.Duration
		var faults int64
		for i := 0; i < b.N; i++ {
			stream := "live:" + strconv.Itoa(i)
			sink := lock.NewStreamSink(sb.rdb, stream, -1)
			p := startServe(b, sb.bin, sb.srv.URL(), nil, "--stream", stream)
			counted := func() float64 {
				m, _, err := scrape(sb.ctx, p.url("/metrics"))
				if err != nil {
					return -1
				}
				return m.sum("lockscope_events_total")
			}
			// One event first: serve is following the stream once it
			// is counted, so what follows is read live, not replayed.
			warm := []event.Event{{Type: event.Acquired, Key: "live:warm", Owner: "api/host-1/42", Lease: "1", TS: time.Now().UnixNano(), TTL: time.Second, Attempts: 1}}
			if err := sink.Write(sb.ctx, warm); err != nil {
				b.Fatal(err)
			}
			if !redistest.Poll(sb.ctx, func() bool { return counted() >= 1 }) {
				b.Fatal("serve did not count the first event")
			}
			want := float64(1)
			if !*liveCold {
				// A production collector has run for a while: its key
				// table is full (500 000 keys are more than --max-keys),
				// each key's ring has grown, and its heap has reached
				// the size it keeps (each page of it first touched costs
				// a page fault). The same stream twice, unmeasured and as
				// fast as serve takes it, gets it there: after one pass
				// the next garbage collection cycles still grew the heap.
				for range liveWarmPasses {
					writeLive(sb.ctx, b, sink, sb.keys, 0)
					want += liveEvents
				}
				if !redistest.Poll(sb.ctx, func() bool { return counted() >= want }) {
					b.Fatal("serve did not count the warm-up events")
				}
			}
			st0, err := readProcStat(p.cmd.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			writeLive(sb.ctx, b, sink, sb.keys, liveRate)
			wrote := time.Now()
			want += liveEvents
			var n float64
			if !redistest.Poll(sb.ctx, func() bool { n = counted(); return n >= want }) {
				b.Fatalf("serve counted %v of %v events", n, want)
			}
			lag += time.Since(wrote)
			st1, err := readProcStat(p.cmd.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			cpu += st1.cpu - st0.cpu
			faults += st1.minflt - st0.minflt
			if n != want {
				b.Fatalf("serve counted %v events, want %v", n, want)
			}
			p.kill(b)
			sb.rdb.Del(sb.ctx, stream)
		}
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(liveEvents*b.N), "cpu-ns/event")
		b.ReportMetric(float64(lag.Milliseconds())/float64(b.N), "lag-ms")
		b.ReportMetric(float64(faults)/float64(b.N), "page-faults")
	})
}

// liveCold measures BenchmarkServeLive from a new serve, without the warm-up.
var liveCold = flag.Bool("live-cold", false, "BenchmarkServeLive: measure from a new serve, without warming it up first")

// liveWarmPasses is how many times BenchmarkServeLive writes its stream to
// warm serve up before measuring.
const liveWarmPasses = 2

const (
	liveEvents = 1_000_000
	liveRate   = 250_000 // events/s
)

// writeLive writes liveEvents events at rate events/s (0: as fast as it
// can), stamped with the time they are written.
func writeLive(ctx context.Context, b *testing.B, s *lock.StreamSink, keys, rate int) {
	b.Helper()
	batch := make([]event.Event, 0, 512)
	start := time.Now()
	for i := 0; i < liveEvents; i += 2 {
		k := "order:" + strconv.Itoa(i/2%keys)
		lease := strconv.FormatInt(int64(i), 16)
		ts := time.Now().UnixNano()
		batch = append(batch,
			event.Event{Type: event.Acquired, Key: k, Owner: "api/host-1/42", Lease: lease, TS: ts, Wait: 200 * time.Microsecond, TTL: 30 * time.Second, Attempts: 1},
			event.Event{Type: event.Released, Key: k, Owner: "api/host-1/42", Lease: lease, TS: ts + 1000, Hold: time.Microsecond})
		if len(batch) == cap(batch) {
			if err := s.Write(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
			if rate > 0 {
				// Keep to the rate: sleep until the events written so far are due.
				time.Sleep(time.Until(start.Add(time.Duration(i+2) * time.Second / time.Duration(rate))))
			}
		}
	}
	if err := s.Write(ctx, batch); err != nil {
		b.Fatal(err)
	}
}

// procStat is what the serve benchmarks read of a process from /proc.
type procStat struct {
	cpu    time.Duration // user + system
	minflt int64         // minor page faults: memory touched for the first time
}

func readProcStat(pid int) (procStat, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// Fields after the command name (which is in parentheses): minflt is
	// the 8th, utime and stime the 12th and 13th, in clock ticks (100 per
	// second).
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	mf, err0 := strconv.ParseInt(f[7], 10, 64)
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err0 != nil || err1 != nil || err2 != nil {
		return procStat{}, os.ErrInvalid
	}
	return procStat{cpu: time.Duration(ut+st) * 10 * time.Millisecond, minflt: mf}, nil
}

package collector

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector/internal/evtest"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// benchEvents is a realistic mix: acquire/release pairs over keys keys of
// 20 classes, one acquisition in 8 contended, one try in 16 refused, step
// apart from t0 on.
func benchEvents(n, keys int, t0 time.Time, step time.Duration) []event.Event {
	evs := make([]event.Event, 0, n)
	ts := t0.UnixNano()
	for i := 0; len(evs) < n; i++ {
		key := "bench:" + strconv.Itoa(i%20) + ":job:" + strconv.Itoa(i%keys)
		owner := "svc-" + strconv.Itoa(i%20) + "/host-" + strconv.Itoa(i%7) + "/4242"
		lease := strconv.FormatInt(int64(i), 16)
		ts += int64(step)
		if i%16 == 15 {
			evs = append(evs, event.Event{Type: event.Failed, Key: key, Owner: owner, TS: ts, Reason: event.ReasonHeld, Attempts: 1, Holder: "svc-x"})
			continue
		}
		att := 1
		if i%8 == 7 {
			att = 3
		}
		evs = append(evs, event.Event{Type: event.Acquired, Key: key, Owner: owner, Lease: lease, TS: ts, Wait: time.Duration(att) * time.Millisecond, TTL: 30 * time.Second, Attempts: att})
		if len(evs) < n {
			ts += int64(step)
			evs = append(evs, event.Event{Type: event.Released, Key: key, Owner: owner, Lease: lease, TS: ts, Hold: 5 * time.Millisecond})
		}
	}
	return evs
}

// prefilled is a stream pre-filled by prefill, shared by the benchmark runs
// of one key count.
type prefilled struct {
	once   sync.Once
	stream string
	n      int
	err    error
}

var prefills = map[int]*prefilled{10_000: {}, 500_000: {}}

// prefill writes 1 M events over keys keys to a stream of its own, once,
// timed over the minute before, as a backlog is: a replay (whose clock is the
// events' time) sees the 30 s TTLs of the first half lapse.
func prefill(ctx context.Context, rdb *redis.Client, keys int) *prefilled {
	p := prefills[keys]
	p.once.Do(func() {
		p.stream, p.n = "bench:ingest:events:"+strconv.Itoa(keys), 1_000_000
		evs := benchEvents(p.n, keys, time.Now().Add(-time.Minute), time.Minute/time.Duration(p.n))
		pipe := rdb.Pipeline()
		for i := 0; i < len(evs); i += 512 {
			chunk := evs[i:min(i+512, len(evs))]
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: p.stream, Values: event.PackedFields(len(chunk), event.Pack(chunk))})
			if pipe.Len() == 100 {
				if _, p.err = pipe.Exec(ctx); p.err != nil {
					return
				}
			}
		}
		_, p.err = pipe.Exec(ctx)
	})
	return p
}

// BenchmarkIngest measures the whole ingest path (XREADGROUP, decode,
// aggregate, XACK) over a stream pre-filled with 1 M events in packed
// entries of 512, as the Go emitter writes them, over 10 000 keys and over
// 500 000 (more than the default MaxKeys: the Aggregator evicts). Each
// iteration reads the whole stream through a new group into a new
// Aggregator. The replay variants read it as a new replica does, which is
// what `lockscope serve` does with a backlog: the rebuild replays the stream
// (XRANGE, Aggregator.Replay) before the replica's group takes over.
// Reported beside the wall-clock rate: the benchmark process's CPU time per
// event (collector and Redis client; redis-server is another process), which
// the neighbours on a shared machine do not inflate.
//
//	go test -run '^$' -bench BenchmarkIngest -benchtime 3x ./collector/
func BenchmarkIngest(b *testing.B) {
	for _, replay := range []bool{false, true} {
		for _, keys := range []int{10_000, 500_000} {
			name := "keys=" + strconv.Itoa(keys)
			if replay {
				name = "replay/" + name
			}
			b.Run(name, func(b *testing.B) { benchmarkIngest(b, keys, replay) })
		}
	}
}

func benchmarkIngest(b *testing.B, keys int, replay bool) {
	srv := redistest.Shared(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	p := prefill(ctx, rdb, keys)
	if p.err != nil {
		b.Fatal(p.err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var elapsed, cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		agg := state.New(state.Config{})
		name := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
		opt := &Options{Stream: p.stream, Group: name, Backfill: 100_000 * time.Hour, Logger: quiet}
		if replay {
			opt.Group, opt.Replica = "", name
		}
		c := New(rdb, agg, opt)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		b.StartTimer()
		start, cpu0 := time.Now(), evtest.CPUTime()
		go func() { done <- c.Run(runCtx) }()
		for agg.Overview().EventsTotal < int64(p.n) {
			time.Sleep(time.Millisecond)
		}
		elapsed += time.Since(start)
		cpu += evtest.CPUTime() - cpu0
		b.StopTimer()
		cancel()
		<-done
		if got := agg.Overview().EventsTotal; got != int64(p.n) {
			b.Fatalf("EventsTotal = %d, want %d", got, p.n)
		}
		group := name
		if replay {
			group = replicaGroupPrefix + name
			rdb.Del(ctx, PresenceKey(p.stream, name), CheckpointKey(p.stream))
		}
		rdb.XGroupDestroy(ctx, p.stream, group)
		b.StartTimer()
	}
	b.ReportMetric(float64(p.n)*float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(p.n)/float64(b.N), "ns/event")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(p.n)/float64(b.N), "cpu-ns/event")
}

// BenchmarkFreshness records events through the lock library's Emitter at
// 100 000 events/s (bursts of 1 000 every 10 ms) into a running collector and
// measures, per burst, the time from Record to the burst's last event being
// counted by the state (Aggregator.Overview().EventsTotal, polled every
// millisecond). One iteration is one burst:
//
//	go test -run '^$' -bench BenchmarkFreshness -benchtime 1000x ./collector/
func BenchmarkFreshness(b *testing.B) {
	srv := redistest.Shared(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	stream := redistest.KeyPrefix(b) + "events"
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	agg := state.New(state.Config{})
	c := New(rdb, agg, &Options{Stream: stream, Logger: quiet})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	for agg.Health() != nil {
		time.Sleep(time.Millisecond)
	}
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream})
	defer em.Close(ctx)

	type mark struct {
		cum int64
		at  time.Time
	}
	marks := make(chan mark, 1<<16)
	var lat []time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var total int64
		for m := range marks {
			for total < m.cum {
				time.Sleep(time.Millisecond)
				total = agg.Overview().EventsTotal
			}
			lat = append(lat, time.Since(m.at))
		}
	}()

	const burst = 1000
	evs := benchEvents(burst, 10_000, time.Now(), time.Microsecond)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var cum int64
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		<-tick.C
		at := time.Now()
		for j := range evs {
			e := evs[j]
			e.TS = at.UnixNano()
			em.Record(e)
		}
		cum += burst
		marks <- mark{cum, at}
	}
	rate := float64(cum) / time.Since(start).Seconds()
	close(marks)
	wg.Wait()
	b.StopTimer()
	if st := em.Stats(); st.Dropped != 0 {
		b.Fatalf("emitter dropped %d events; the figures would be wrong", st.Dropped)
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.ReportMetric(rate, "events/s")
}

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

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/redistest"
	"github.com/lockscope/lockscope/lock"
)

// benchEvents is a realistic mix: acquire/release pairs over 10 000 keys of
// 20 classes, one acquisition in 8 contended, one try in 16 refused.
func benchEvents(n int, t0 time.Time) []event.Event {
	evs := make([]event.Event, 0, n)
	ts := t0.UnixNano()
	for i := 0; len(evs) < n; i++ {
		key := "bench:" + strconv.Itoa(i%20) + ":job:" + strconv.Itoa(i%10_000)
		owner := "svc-" + strconv.Itoa(i%20) + "/host-" + strconv.Itoa(i%7) + "/4242"
		lease := strconv.FormatInt(int64(i), 16)
		ts += 1000
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
			ts += 1000
			evs = append(evs, event.Event{Type: event.Released, Key: key, Owner: owner, Lease: lease, TS: ts, Hold: 5 * time.Millisecond})
		}
	}
	return evs
}

var prefill struct {
	once   sync.Once
	stream string
	n      int
	err    error
}

// BenchmarkIngest measures the whole ingest path (XREADGROUP, decode,
// aggregate, XACK) over a stream pre-filled with 1 M events in packed
// entries of 512, as the Go emitter writes them. Each iteration reads the
// whole stream through a new group into a new Aggregator.
//
//	go test -run '^$' -bench BenchmarkIngest -benchtime 3x ./collector/
func BenchmarkIngest(b *testing.B) {
	srv := redistest.Shared(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	prefill.once.Do(func() {
		prefill.stream, prefill.n = "bench:ingest:events", 1_000_000
		evs := benchEvents(prefill.n, time.Now())
		pipe := rdb.Pipeline()
		for i := 0; i < len(evs); i += 512 {
			chunk := evs[i:min(i+512, len(evs))]
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: prefill.stream, Values: event.PackedFields(len(chunk), event.Pack(chunk))})
			if pipe.Len() == 100 {
				if _, prefill.err = pipe.Exec(ctx); prefill.err != nil {
					return
				}
			}
		}
		_, prefill.err = pipe.Exec(ctx)
	})
	if prefill.err != nil {
		b.Fatal(prefill.err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var elapsed time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		agg := NewAggregator(Config{})
		group := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
		c := New(rdb, agg, &Options{Stream: prefill.stream, Group: group, Backfill: 100_000 * time.Hour, Logger: quiet})
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		b.StartTimer()
		start := time.Now()
		go func() { done <- c.Run(runCtx) }()
		for agg.Overview().EventsTotal < int64(prefill.n) {
			time.Sleep(time.Millisecond)
		}
		elapsed += time.Since(start)
		b.StopTimer()
		cancel()
		<-done
		if got := agg.Overview().EventsTotal; got != int64(prefill.n) {
			b.Fatalf("EventsTotal = %d, want %d", got, prefill.n)
		}
		rdb.XGroupDestroy(ctx, prefill.stream, group)
		b.StartTimer()
	}
	b.ReportMetric(float64(prefill.n)*float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(prefill.n)/float64(b.N), "ns/event")
}

// BenchmarkFreshness records events through the lock library's Emitter at
// 100 000 events/s (bursts of 1 000 every 10 ms) into a running collector and
// measures, per burst, the time from Record to the burst's last event being
// counted by the Aggregator's Querier (Overview().EventsTotal, polled every
// millisecond). One iteration is one burst:
//
//	go test -run '^$' -bench BenchmarkFreshness -benchtime 1000x ./collector/
func BenchmarkFreshness(b *testing.B) {
	srv := redistest.Shared(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	stream := redistest.KeyPrefix(b) + "events"
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	agg := NewAggregator(Config{})
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
	evs := benchEvents(burst, time.Now())
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

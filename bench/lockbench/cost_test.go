package lockbench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// The paired measurement of what events cost: windows of costWindow, with
// events then without or the other way round, costPairs times.
const (
	costWindow = 250 * time.Millisecond
	costPairs  = 16
)

// BenchmarkEventsCost is what events cost the lock path: the same cycle with
// an emitter and without, each in its own client kept for the whole run (so
// their tuners settle once), run in alternating windows of costWindow (on,
// off, off, on, ...) for costPairs pairs. A slow phase of this machine lasts
// seconds, so it falls on both halves of a pair; one-second runs of each in
// turn (BenchmarkCycle) cannot promise that, and there the difference was
// noise (from -20 to +29 % at 16 callers). Each pair gives 1 - on/off in
// cycles per second; reported are the median over the pairs (events-cost-%)
// and the quartiles. Each pair also gives the client's CPU per cycle (this
// process's user + system time, the emitter's goroutine and the window's
// Flush included; Redis runs in a process of its own) with events over
// without: cpu-cost-% is the median over the pairs of on/off - 1, with its
// quartiles, what the instrumentation costs where the client's CPU is what
// limits (a loaded host).
//
// stream=trimmed fills the stream to its trimmed length first, so every
// window runs in the regime a stream whose MaxLen fits its rate stays in;
// stream=growing starts a new stream that is never trimmed, the regime of a
// stream below its MaxLen, where Redis's CPU per event is some eight times
// higher (every entry is new memory; BENCHMARKS.md, issue 28). An "on"
// window ends with Flush: it pays for all of its events.
//
// One op is the whole sequence, some 10 s; the default -benchtime runs it
// once.
func BenchmarkEventsCost(b *testing.B) {
	for _, stream := range []string{"trimmed", "growing"} {
		for _, keys := range []string{"unique", "hot16"} {
			for _, callers := range []int{1, 8, 16, 64} {
				name := fmt.Sprintf("stream=%s/keys=%s/callers=%d", stream, keys, callers)
				b.Run(name, func(b *testing.B) { benchEventsCost(b, stream == "growing", keys == "hot16", callers, false) })
			}
		}
	}
}

// BenchmarkEventsCostOneClient is BenchmarkEventsCost with one client for
// both halves of a pair: its recorder passes events to the emitter in the
// "on" windows and drops them in the "off" ones. Two clients' tuners can
// settle in different regimes for a whole run (on 2026-12-04 the same
// case's cpu-cost-% moved from -25 % to +28 % between runs, BENCHMARKS.md),
// and one client cannot differ from itself that way. Its "off" windows
// still build the events (Client's side of them), so it measures the
// emitter's part: buffering, packing, XADD.
func BenchmarkEventsCostOneClient(b *testing.B) {
	for _, keys := range []string{"unique", "hot16"} {
		for _, callers := range []int{1, 8, 16, 64} {
			name := fmt.Sprintf("stream=trimmed/keys=%s/callers=%d", keys, callers)
			b.Run(name, func(b *testing.B) { benchEventsCost(b, false, keys == "hot16", callers, true) })
		}
	}
}

// switchRecorder passes events to em while on is set, else drops them.
type switchRecorder struct {
	on atomic.Bool
	em *lock.Emitter
}

func (r *switchRecorder) Record(e event.Event) {
	if r.on.Load() {
		r.em.Record(e)
	}
}

func benchEventsCost(b *testing.B, growing, hot bool, callers int, oneClient bool) {
	s := server(b)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer admin.Close()

	key, maxLen := stream+":cost:trimmed", int64(eventsKept/defaultBatch)
	if growing {
		key, maxLen = stream+":cost:growing", -1
	}
	if err := admin.Del(ctx, key).Err(); err != nil {
		b.Fatal(err)
	}
	if !growing {
		// Entries the size of the emitter's full ones (some 150 kB), past
		// the trimmed length: from the first window on, each new entry
		// reuses what a trimmed one freed.
		blob := make([]byte, 150<<10)
		for range maxLen * 3 / 2 {
			if err := admin.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: maxLen, Approx: true, Values: []any{"fill", blob}}).Err(); err != nil {
				b.Fatal(err)
			}
		}
	}

	type side struct {
		rdb    *redis.Client
		c      *lock.Client
		em     *lock.Emitter
		keys   []string
		toggle *switchRecorder // oneClient: set to the window's side
		events bool
	}
	newSide := func(events bool) *side {
		sd := &side{rdb: redis.NewClient(&redis.Options{Addr: s.Addr()})}
		opt := &lock.Options{Owner: "bench"}
		prefix := "cost:off:"
		if events {
			sd.em = lock.NewEmitter(sd.rdb, &lock.EmitterOptions{Stream: key, MaxLen: maxLen})
			opt.Recorder = sd.em
			prefix = "cost:on:"
		}
		sd.c = lock.New(sd.rdb, opt)
		sd.keys = make([]string, callers)
		for w := range sd.keys {
			if hot {
				sd.keys[w] = prefix + "hot:" + strconv.Itoa(w%hotKeys)
			} else {
				sd.keys[w] = prefix + "unique:" + strconv.Itoa(w)
			}
		}
		return sd
	}
	var on, off *side
	if oneClient {
		on = newSide(false)
		on.em = lock.NewEmitter(on.rdb, &lock.EmitterOptions{Stream: key, MaxLen: maxLen})
		on.toggle = &switchRecorder{em: on.em}
		on.c = lock.New(on.rdb, &lock.Options{Owner: "bench", Recorder: on.toggle})
		on.events = true
		off = &side{rdb: on.rdb, c: on.c, keys: on.keys, toggle: on.toggle}
	} else {
		on, off = newSide(true), newSide(false)
	}
	defer func() {
		on.em.Close(ctx)
		on.rdb.Close()
		if off.rdb != on.rdb {
			off.rdb.Close()
		}
	}()
	once := &lock.ObtainOptions{}
	waiting := &lock.ObtainOptions{Retry: lock.LinearBackoff(retryGap)}
	opt := once
	if hot {
		opt = waiting
	}

	// window runs callers cycling on sd for d and returns cycles per second
	// and the process's CPU time per cycle.
	window := func(sd *side, d time.Duration) (rate float64, cpu time.Duration) {
		var stop atomic.Bool
		var done atomic.Int64
		var failed atomic.Pointer[error]
		var wg sync.WaitGroup
		if sd.toggle != nil {
			sd.toggle.on.Store(sd.events)
		}
		cpu0 := redistest.SelfCPU(b)
		start := time.Now()
		t := time.AfterFunc(d, func() { stop.Store(true) })
		defer t.Stop()
		for w := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := int64(0)
				for !stop.Load() {
					l, err := sd.c.Obtain(ctx, sd.keys[w], ttl, opt)
					if err == nil {
						err = l.Release(ctx)
					}
					if err != nil {
						failed.CompareAndSwap(nil, &err)
						stop.Store(true)
						break
					}
					n++
				}
				done.Add(n)
			}()
		}
		wg.Wait()
		if sd.em != nil {
			if err := sd.em.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
		elapsed := time.Since(start)
		cpu = redistest.SelfCPU(b) - cpu0
		if err := failed.Load(); err != nil {
			b.Fatalf("cycle: %v", *err)
		}
		n := done.Load()
		if n == 0 {
			b.Fatal("no cycle completed in a window")
		}
		return float64(n) / elapsed.Seconds(), cpu / time.Duration(n)
	}

	for range b.N {
		// Warm up both clients: connections, scripts, the tuners' first rounds.
		window(on, costWindow)
		window(off, costWindow)
		costs := make([]float64, 0, costPairs)
		cpuCosts := make([]float64, 0, costPairs)
		ons := make([]float64, 0, costPairs)
		offs := make([]float64, 0, costPairs)
		for i := range costPairs {
			var a, z float64
			var ca, cz time.Duration
			if i%2 == 0 {
				a, ca = window(on, costWindow)
				z, cz = window(off, costWindow)
			} else {
				z, cz = window(off, costWindow)
				a, ca = window(on, costWindow)
			}
			ons, offs = append(ons, a), append(offs, z)
			costs = append(costs, 100*(1-a/z))
			cpuCosts = append(cpuCosts, 100*(float64(ca)/float64(cz)-1))
		}
		if st := on.em.Stats(); st.Dropped > 0 {
			b.Fatalf("the emitter dropped %d events: the cost of events that were not written is not measured", st.Dropped)
		}
		b.ReportMetric(quantile(costs, 0.5), "events-cost-%")
		b.ReportMetric(quantile(costs, 0.25), "p25-%")
		b.ReportMetric(quantile(costs, 0.75), "p75-%")
		b.ReportMetric(quantile(cpuCosts, 0.5), "cpu-cost-%")
		b.ReportMetric(quantile(cpuCosts, 0.25), "cpu-p25-%")
		b.ReportMetric(quantile(cpuCosts, 0.75), "cpu-p75-%")
		b.ReportMetric(quantile(ons, 0.5), "on-cycles/s")
		b.ReportMetric(quantile(offs, 0.5), "off-cycles/s")
	}
}

// quantile is xs's q-quantile, interpolated between the nearest two.
func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	i := int(pos)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (pos-float64(i))*(s[i+1]-s[i])
}

func TestQuantile(t *testing.T) {
	xs := []float64{4, 1, 3, 2}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.5, 2.5}, {0.25, 1.75}, {1, 4}} {
		if got := quantile(xs, c.q); got != c.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", xs, c.q, got, c.want)
		}
	}
	if xs[0] != 4 {
		t.Error("quantile sorted its argument in place")
	}
}

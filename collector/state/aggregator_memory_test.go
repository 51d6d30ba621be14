package state_test

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

var (
	distinctKeys     = flag.Int("distinct-keys", 10_000_000, "keys BenchmarkDistinctKeys10M streams through")
	distinctKeysHeap = flag.String("distinct-keys-heap", "", "file for a heap profile taken at the end of BenchmarkDistinctKeys10M, aggregator still live")
)

// BenchmarkDistinctKeys10M streams 10 M distinct keys (-distinct-keys to
// change) through an Aggregator with the default Config, as the collector
// would apply them, and reports the process's peak and final RSS
// (/proc/self/status VmHWM, VmRSS), the peak heap sampled every 100 k keys
// and the live heap after a final GC. Each key sees a realistic few events:
// an acquisition (one in four after retries), a refused try from another
// owner for one in four, a renewal for one in eight, and a release, except
// one in a hundred whose holder dies and whose hold expires by Tick. The
// clock advances 1 ms per key, so the run covers 2.8 hours and every hot-key
// bucket fills. Run it alone, in its own process (RSS is the process's):
//
//	go test -run '^$' -bench BenchmarkDistinctKeys10M -benchtime 1x ./collector/state/
//
// -distinct-keys N streams N keys instead; -distinct-keys-heap FILE writes a
// heap profile while the aggregator is still live.
func BenchmarkDistinctKeys10M(b *testing.B) {
	for range b.N {
		distinctKeysRun(b, *distinctKeys)
	}
}

func distinctKeysRun(b *testing.B, n int) {
	a, clk := newBenchAggregator(state.Config{})
	owners := make([]string, 256)
	for i := range owners {
		owners[i] = fmt.Sprintf("worker-%d/ip-10-0-%d-%d/%d", i%16, i%8, i%32, 1000+i)
	}
	const group = 512 // keys in flight at once
	evs := make([]event.Event, 0, 4*group)
	// Keys and leases live in an arena overwritten by every group, as
	// decoded events share the stream entry's memory.
	arena := make([]byte, 0, 64*group)
	str := func(start int) string { return unsafe.String(&arena[start], len(arena)-start) }
	keys := make([]string, group)
	leases := make([]string, group)

	var peakHeap uint64
	var ms runtime.MemStats
	sample := func() {
		runtime.ReadMemStats(&ms)
		peakHeap = max(peakHeap, ms.HeapAlloc)
	}
	b.ResetTimer()
	start := time.Now()
	for base := 0; base < n; base += group {
		m := min(group, n-base)
		arena = arena[:0]
		evs = evs[:0]
		for j := range m {
			i := base + j
			s := len(arena)
			arena = append(arena, "tenant-"...)
			arena = strconv.AppendInt(arena, int64(i%5000), 10)
			arena = append(arena, ":job:"...)
			arena = strconv.AppendInt(arena, int64(i), 10)
			keys[j] = str(s)
			s = len(arena)
			arena = fmt.Appendf(arena, "%016x", uint64(i)*0x9e3779b97f4a7c15)
			leases[j] = str(s)
		}
		ts := clk.Now().UnixNano()
		for j := range m {
			i := base + j
			e := event.Event{Type: event.Acquired, Key: keys[j], Owner: owners[i%len(owners)], Lease: leases[j],
				TS: ts, Wait: time.Millisecond, Attempts: 1, TTL: 30 * time.Second}
			if i%4 == 0 {
				e.Attempts, e.Wait = 3, 50*time.Millisecond
			}
			evs = append(evs, e)
		}
		for j := range m {
			i := base + j
			if i%4 == 1 {
				evs = append(evs, event.Event{Type: event.Failed, Key: keys[j], Owner: owners[(i+1)%len(owners)], TS: ts,
					Attempts: 1, Reason: event.ReasonHeld, Holder: owners[i%len(owners)]})
			}
			if i%8 == 2 {
				evs = append(evs, event.Event{Type: event.Renewed, Key: keys[j], Owner: owners[i%len(owners)], Lease: leases[j],
					TS: ts, TTL: 30 * time.Second})
			}
		}
		for j := range m {
			i := base + j
			if i%100 != 99 {
				evs = append(evs, event.Event{Type: event.Released, Key: keys[j], Owner: owners[i%len(owners)], Lease: leases[j],
					TS: ts, Hold: time.Duration(1+i%500) * time.Millisecond})
			}
		}
		for i := 0; i < len(evs); i += 256 {
			a.Apply(evs[i:min(i+256, len(evs))])
		}
		// 1 ms per key; Tick every 100 ms, as the collector does.
		for range m / 100 {
			clk.Add(100 * time.Millisecond)
			a.Tick()
		}
		clk.Add(time.Duration(m%100) * time.Millisecond)
		if base%100_000 < group {
			sample()
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	sample()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	live := ms.HeapAlloc
	if *distinctKeysHeap != "" {
		f, err := os.Create(*distinctKeysHeap)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	hwm, rss := procStatus("VmHWM"), procStatus("VmRSS")
	tracked := a.Overview().TrackedKeys
	if tracked > state.DefaultMaxKeys {
		b.Fatalf("tracked keys = %d, want at most %d", tracked, state.DefaultMaxKeys)
	}
	b.ReportMetric(float64(tracked), "tracked-keys")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(n), "ns/key")
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MB")
	b.ReportMetric(float64(live)/(1<<20), "live-heap-MB")
	b.ReportMetric(float64(hwm)/(1<<20), "peak-rss-MB")
	b.ReportMetric(float64(rss)/(1<<20), "rss-MB")
	runtime.KeepAlive(a)
}

// procStatus returns a size field of /proc/self/status in bytes (0 if
// unavailable).
func procStatus(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok || string(name) != field {
			continue
		}
		kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte(" kB"))), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

package state_test

import (
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/internal/evtest"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// BenchmarkHostileWorstCase feeds an Aggregator with the default Config
// the streams that make it keep the most, under the soft memory limit
// `lockscope serve` sets by default (64 MiB + 1 KiB per --max-keys), and
// reports the live heap after a GC and the process's peak RSS: what no
// stream can push past with the defaults (docs/deployment.md, "What a writer of the
// stream can do"). Over an hour of event time, none of its strings twice
// (so none is interned):
//
//   - 1 100 new keys every 10 s, each contended (so the hot-key sketches of
//     every bucket of the hour are full), half of them released, half held
//     for an hour and renewed (a large expiry heap): 396 000 keys, twice
//     --max-keys. Shape "long": every string at the length the state keeps
//     (state.MaxKeyBytes, MaxTextBytes, MaxReasonBytes), so that the byte
//     budget (Config.MaxBytes) binds; shape "many": keys of 200 bytes and
//     short owners and leases, so that MaxKeys binds.
//   - 100 000 callers waiting, each holding a lease, strings at their
//     limits;
//   - 10 000 passive releases waiting (parked) for a forced release.
//
// Run each shape in a process of its own (the peak RSS is the process's):
//
//	go test -run '^$' -bench 'BenchmarkHostileWorstCase/shape=long' -benchtime 1x ./collector/state/
//	go test -run '^$' -bench 'BenchmarkHostileWorstCase/shape=many' -benchtime 1x ./collector/state/
func BenchmarkHostileWorstCase(b *testing.B) {
	for _, shape := range []string{"long", "many"} {
		b.Run("shape="+shape, func(b *testing.B) {
			debug.SetMemoryLimit(64<<20 + int64(state.DefaultMaxKeys)<<10)
			defer debug.SetMemoryLimit(math.MaxInt64)
			for range b.N {
				live := hostileWorstCase(b, shape == "long")
				b.ReportMetric(float64(live)/(1<<20), "live-MB")
			}
			if hwm, err := redistest.PeakRSS(0); err == nil {
				b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MB")
			}
		})
	}
}

func hostileWorstCase(b *testing.B, long bool) uint64 {
	clk := evtest.NewClock()
	a := state.New(state.Config{Now: clk.Now})
	n := 0
	pad := func(tag string, max int) string {
		n++
		s := fmt.Sprintf("%s%09d", tag, n)
		return s + strings.Repeat("x", max-len(s))
	}
	keyLen, textLen, reasonLen := state.MaxKeyBytes, state.MaxTextBytes, state.MaxReasonBytes
	if !long {
		keyLen, textLen, reasonLen = 200, 20, 0
	}
	text := func(tag string, max int) string {
		if max == 0 {
			return ""
		}
		return pad(tag, max)
	}
	t0 := evtest.T0
	var evs []event.Event
	for step := range 360 {
		at := t0.Add(time.Duration(step) * 10 * time.Second)
		clk.Set(at.Add(5 * time.Second))
		evs = evs[:0]
		for k := range 1100 {
			ts := at.Add(time.Duration(k) * time.Millisecond).UnixNano()
			key := pad("key:", keyLen)
			lease := text("L", textLen)
			evs = append(evs, event.Event{Type: event.Acquired, Key: key, Owner: text("O", textLen), Lease: lease, TS: ts,
				Wait: time.Second, Attempts: 2, TTL: time.Hour, Reason: text("R", reasonLen)})
			if k%2 == 0 {
				evs = append(evs, event.Event{Type: event.Released, Key: key, Owner: text("O", textLen), Lease: lease, TS: ts + 1,
					Reason: text("R", reasonLen)})
			} else {
				for r := range 3 {
					evs = append(evs, event.Event{Type: event.Renewed, Key: key, Owner: text("O", textLen), Lease: lease,
						TS: ts + int64(r) + 1, TTL: time.Hour})
				}
			}
		}
		a.Apply(evs)
		a.Tick()
	}
	now := t0.Add(time.Hour)
	clk.Set(now)
	// Applied a thousand at a time, as the collector does: the events
	// themselves are not the state's memory.
	for range 100 {
		evs = evs[:0]
		for range 1000 {
			evs = append(evs, event.Event{Type: event.Waiting, Key: pad("wkey:", state.MaxKeyBytes), Owner: pad("O", state.MaxTextBytes),
				Lease: pad("W", state.MaxTextBytes), Holder: pad("H", state.MaxTextBytes), Reason: pad("R", state.MaxReasonBytes),
				TS: now.UnixNano(), Wait: time.Hour})
		}
		a.Apply(evs)
	}
	for range 10 {
		evs = evs[:0]
		for range 1000 {
			evs = append(evs, event.Event{Type: event.Released, Key: pad("pkey:", state.MaxKeyBytes), Owner: pad("O", state.MaxTextBytes),
				TS: now.UnixNano(), Passive: true})
		}
		a.Apply(evs)
	}
	evs = nil
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	o := a.Overview()
	b.Logf("tracked keys %d, waiters %d; heap in use %.0f MB", o.TrackedKeys, o.Waiters, float64(ms.HeapInuse)/(1<<20))
	runtime.KeepAlive(a)
	return ms.HeapAlloc
}

// Package extratest is the adapters' shared test support: a lock.Recorder
// that keeps what it is given, and the benchmark loop.
package extratest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/redistest"
	"github.com/lockscope/lockscope/lock"
)

// Recorder keeps every event recorded, in order.
type Recorder struct {
	mu     sync.Mutex
	events []event.Event
}

var _ lock.Recorder = (*Recorder)(nil)

// Record keeps e.
func (r *Recorder) Record(e event.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns the events so far.
func (r *Recorder) Events() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event.Event(nil), r.events...)
}

// Step is what a test compares of an event: its type and who, the
// durations and times left out.
type Step struct {
	Type                              event.Type
	Key, Owner, Lease, Holder, Reason string
	Attempts                          int
}

// Steps returns the recorded events as Steps.
func (r *Recorder) Steps() []Step {
	var out []Step
	for _, e := range r.Events() {
		out = append(out, Step{e.Type, e.Key, e.Owner, e.Lease, e.Holder, e.Reason, e.Attempts})
	}
	return out
}

// Cycles runs b.N calls of cycle from callers goroutines (each with its own
// index) and reports, beside the wall clock, CPU figures that other load on
// the machine moves less: this process's CPU time per op (the library, the
// emitter and go-redis: client-ns/op) and redis-server's (server-ns/op),
// read from rdb's INFO.
func Cycles(b *testing.B, rdb *redis.Client, callers int, cycle func(ctx context.Context, caller int) error) {
	ctx := context.Background()
	for w := range callers { // warm up the connections and the scripts
		if err := cycle(ctx, w); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	server0, self0 := redistest.ServerCPU(b, rdb), redistest.SelfCPU(b)
	b.ResetTimer()
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := cycle(ctx, w); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatalf("cycle: %v", *err)
	}
	server, self := redistest.ServerCPU(b, rdb)-server0, redistest.SelfCPU(b)-self0
	b.ReportMetric(float64(self.Nanoseconds())/float64(b.N), "client-ns/op")
	b.ReportMetric(float64(server.Nanoseconds())/float64(b.N), "server-ns/op")
}

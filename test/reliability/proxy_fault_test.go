package reliability

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/faultproxy"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// verifyNoLeaks fails t if goroutines other than those in ignore remain,
// waiting up to 15s for goroutines that are on their way out.
func verifyNoLeaks(t *testing.T, ignore ...goleak.Option) {
	t.Helper()
	var err error
	if !redistest.Poll(testCtx(t, 15*time.Second), func() bool { err = goleak.Find(ignore...); return err == nil }) {
		t.Errorf("goroutines leaked: %v", err)
	}
}

// The bounds below sit at the least time the wrong behaviour takes, not at
// a margin over the right one: a loaded host only slows the right answer,
// and the figures are logged.
const (
	// roundTrip is a round trip of the injected latency (200 ms each way):
	// the least an Obtain that waited for its reply takes (in a stall, a
	// wait for the reply lasts a write timeout, 1 s, or for ever).
	roundTrip = 400 * time.Millisecond
	// recordBound is half go-redis's write timeout (1 s), the least a
	// Record that waited for I/O takes.
	recordBound = 500 * time.Millisecond
	// lossBound is between the lease's 600 ms TTL and the 2.8 s at least a
	// renewer that waited for its stalled call would take (go-redis's read
	// timeout, 3 s, from a renewal sent at most 200 ms before the stall).
	lossBound = 1500 * time.Millisecond
)

// timed runs f and returns how long it took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// TestLockThroughLatencyAndStalls puts a TCP proxy between the lock library
// (and its emitter) and Redis, injects 200ms of latency each way and then a
// full stall, and checks that every call honours its deadline, that Record
// never blocks, that drops are counted and then reported, that a lease
// whose renewals cannot get through is known lost by the end of its TTL,
// and that nothing is left running afterwards.
//
// Two client configurations: go-redis's defaults (what most applications
// pass to lock.New) and ContextTimeoutEnabled. The library promises that
// waits stop at the context's deadline whatever the client's options.
func TestLockThroughLatencyAndStalls(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  redis.Options
	}{
		{"DefaultClientOptions", redis.Options{}},
		{"ContextTimeoutEnabled", redis.Options{ContextTimeoutEnabled: true}},
	} {
		t.Run(tc.name, func(t *testing.T) { lockThroughFaults(t, tc.opt) })
	}
}

func lockThroughFaults(t *testing.T, opt redis.Options) {
	srv := redistest.Shared(t)
	ignore := goleak.IgnoreCurrent()
	direct := srv.Client(t)
	ctx := testCtx(t, 60*time.Second)
	p := redistest.KeyPrefix(t)
	stream := p + "events"

	proxy, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	opt.Addr = proxy.Addr()
	rdb := redis.NewClient(&opt)
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream, MaxLen: -1, BufferSize: 2000, BatchSize: 200})
	client := lock.New(rdb, &lock.Options{Owner: "app", Recorder: em})
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	// checkDeadline runs n concurrent Obtains of free keys with a 100ms
	// deadline and checks each fails by its deadline, without leaving the
	// key held for its 30s TTL.
	checkDeadline := func(phase string, n int) {
		t.Helper()
		const deadline = 100 * time.Millisecond
		var wg sync.WaitGroup
		errs := make([]error, n)
		took := make([]time.Duration, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				octx, cancel := context.WithTimeout(ctx, deadline)
				defer cancel()
				took[i] = timed(func() {
					var l *lock.Lease
					l, errs[i] = client.Obtain(octx, fmt.Sprintf("%s%s:%d", p, phase, i), 30*time.Second, nil)
					if l != nil {
						l.Release(ctx)
					}
				})
			}()
		}
		wg.Wait()
		for i := range n {
			if errs[i] == nil || !errors.Is(errs[i], lock.ErrNotObtained) {
				t.Errorf("%s: Obtain #%d with a %v deadline = %v, want ErrNotObtained", phase, i, deadline, errs[i])
			}
			if took[i] >= roundTrip {
				t.Errorf("%s: Obtain #%d with a %v deadline returned after %v, want by the deadline, not after a round trip (%v)", phase, i, deadline, took[i], roundTrip)
			}
		}
		t.Logf("%s: %d Obtains with a %v deadline returned after at most %v", phase, n, deadline, slices.Max(took))
	}

	// recordBurst records n events and returns the slowest Record call. A
	// Record that waited for I/O would take about a write timeout (1s) or a
	// go-redis read timeout (3s); the bound leaves room for a scheduler
	// that shares 2 cores with other test binaries.
	recordBurst := func(n int) time.Duration {
		var slowest time.Duration
		for i := range n {
			d := timed(func() {
				em.Record(event.Event{Type: event.Acquired, Key: fmt.Sprintf("%sburst:%d", p, i), Owner: "app", TTL: time.Second})
			})
			slowest = max(slowest, d)
		}
		return slowest
	}

	// A lease renewing through the proxy, taken while the network is good.
	held, err := client.Obtain(ctx, p+"held", 600*time.Millisecond, &lock.ObtainOptions{AutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}

	// Latency: 200ms each way, a round trip takes 400ms.
	proxy.SetLatency(200 * time.Millisecond)
	checkDeadline("latency", 8)
	if slowest := recordBurst(5000); slowest >= recordBound {
		t.Errorf("slowest Record under latency took %v, want < %v (never blocks)", slowest, recordBound)
	} else {
		t.Logf("slowest Record under latency: %v", slowest)
	}

	// Stall: connections open, no byte moves. The lease's loss is timed
	// from here, by a watcher that does not wait for the checks below.
	lostAt := make(chan time.Time, 1)
	go func() {
		select {
		case <-held.Done():
			lostAt <- time.Now()
		case <-time.After(10 * time.Second):
			close(lostAt)
		}
	}()
	proxy.SetLatency(0)
	proxy.Stall()
	stalled := time.Now()
	checkDeadline("stall", 8)
	if slowest := recordBurst(5000); slowest >= recordBound {
		t.Errorf("slowest Record under a stall took %v, want < %v (never blocks)", slowest, recordBound)
	} else {
		t.Logf("slowest Record under a stall: %v", slowest)
	}
	// The lease cannot renew: it must know it is lost by the end of its TTL
	// (600ms from its last renewal, at most 600ms before the stall).
	if at, ok := <-lostAt; !ok {
		t.Errorf("lease still not lost 10s into a stall with a 600ms TTL")
	} else {
		took := at.Sub(stalled)
		t.Logf("lease learned of its loss %v into the stall (TTL 600ms)", took)
		if took >= lossBound {
			t.Errorf("lease learned of its loss %v into the stall, want within its 600ms TTL, not when its renewal timed out", took)
		}
		if !errors.Is(held.Err(), lock.ErrLost) {
			t.Errorf("lease Err() after stalled renewals = %v, want ErrLost", held.Err())
		}
	}
	droppedInStall := em.Stats().Dropped
	if droppedInStall == 0 {
		t.Errorf("emitter dropped nothing during a stall with 10k events and a 2k buffer")
	}
	fctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if d := timed(func() { em.Flush(fctx) }); d >= recordBound {
		t.Errorf("Flush with a 100ms deadline during a stall returned after %v, want by its deadline, not a write timeout", d)
	}
	cancel()

	// Heal. Writes that the stall held back may still land, and go-redis
	// discards the connections they timed out on.
	proxy.Resume()
	var l *lock.Lease
	if !redistest.Poll(testCtx(t, 10*time.Second), func() bool {
		octx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		l, err = client.Obtain(octx, p+"after", time.Second, nil)
		return err == nil
	}) {
		t.Fatalf("Obtain after the network healed: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release after the network healed: %v", err)
	}
	// Obtains that timed out must not leave their keys held for 30s.
	for _, phase := range []string{"latency", "stall"} {
		for i := range 8 {
			k := fmt.Sprintf("%s%s:%d", p, phase, i)
			if !redistest.Poll(testCtx(t, 5*time.Second), func() bool { return direct.Exists(ctx, k).Val() == 0 }) {
				t.Errorf("key %q still held %v after its Obtain timed out, want released (orphan cleanup)", k, direct.PTTL(ctx, k).Val())
			}
		}
	}

	// Close flushes; afterwards every recorded event was sent or dropped,
	// and every drop was reported in a dropped event.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if err := em.Close(cctx); err != nil {
		t.Errorf("emitter Close after the network healed: %v", err)
	}
	cancel()
	st := em.Stats()
	if st.Recorded != st.Sent+st.Dropped {
		t.Errorf("Stats() = %+v: recorded != sent + dropped", st)
	}
	read := redistest.ReadStream(t, direct, stream)
	evs, bad := read.Events, read.Malformed
	byType, reported := countTypes(evs)
	if bad != 0 {
		t.Errorf("%d stream entries do not decode", bad)
	}
	// Every drop is reported. A write that timed out may still land (its
	// bytes were on the wire): its events count as dropped though they
	// arrived, and a drop report it carried is sent again. So reports are
	// exact only when no write failed, and at least the drops otherwise.
	switch {
	case reported < int64(st.Dropped):
		t.Errorf("dropped events report %d drops, want at least Stats().Dropped = %d", reported, st.Dropped)
	case st.Errors == 0 && reported != int64(st.Dropped):
		t.Errorf("dropped events report %d drops, want exactly Stats().Dropped = %d (no write failed)", reported, st.Dropped)
	case reported > int64(st.Dropped):
		t.Logf("after %d failed writes, drop reports total %d for %d drops (a timed-out write landed: reports are at-least-once)", st.Errors, reported, st.Dropped)
	}
	// A write that timed out may still have landed: the stream holds at
	// least what was reported sent, and never more than was recorded.
	if got := len(evs) - byType[event.Dropped]; uint64(got) < st.Sent || uint64(got) > st.Recorded {
		t.Errorf("stream holds %d events, want between Sent %d and Recorded %d", got, st.Sent, st.Recorded)
	}
	t.Logf("emitter %+v; dropped during stall %d; stream events %d", st, droppedInStall, len(evs))

	rdb.Close()
	proxy.Close()
	verifyNoLeaks(t, ignore)
}

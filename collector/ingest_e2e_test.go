package collector

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestIngestEndToEndLockLibrary runs a lock-library workload with known counts
// through the emitter, the stream and the collector.
func TestIngestEndToEndLockLibrary(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"

	agg, reg := testAgg(t, state.Config{})
	// Watching the lock keys too: lockscope's own values must not be
	// counted twice.
	c := startFollower(t, rdb, agg, &Options{Stream: stream, Watch: []string{prefix + "job:*"}})
	waitSynced(t, c, 1)

	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream})
	a := lock.New(rdb, &lock.Options{Owner: "worker-a", Recorder: em})
	b := lock.New(rdb, &lock.Options{Owner: "worker-b", Recorder: em})

	keys := make([]string, 20)
	for i := range keys {
		keys[i] = prefix + "job:" + strconv.Itoa(i)
	}
	for round := 0; round < 10; round++ {
		for _, k := range keys {
			l, err := a.Obtain(ctx, k, 10*time.Second, nil)
			if err != nil {
				t.Fatalf("Obtain(%q) = %v, want nil", k, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release(%q) = %v, want nil", k, err)
			}
		}
	}
	// Three keys held by a while b tries them 10, 5 and 15 times.
	tries := map[string]int{keys[0]: 10, keys[1]: 5, keys[2]: 15}
	for k, n := range tries {
		l, err := a.Obtain(ctx, k, 10*time.Second, nil)
		if err != nil {
			t.Fatalf("Obtain(%q) = %v, want nil", k, err)
		}
		for i := 0; i < n; i++ {
			if _, h, err := b.Try(ctx, k, 10*time.Second, nil); !errors.Is(err, lock.ErrNotObtained) || h == nil || h.Owner != "worker-a" {
				t.Fatalf("Try(%q) = holder %+v, %v; want worker-a, ErrNotObtained", k, h, err)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release(%q) = %v, want nil", k, err)
		}
	}
	if err := em.Close(ctx); err != nil {
		t.Fatalf("emitter Close = %v", err)
	}
	if st := em.Stats(); st.Dropped != 0 || st.Sent != 436 {
		t.Fatalf("emitter Stats = %+v, want 436 sent, none dropped", st)
	}

	const total = 2*203 + 30
	redistest.WaitFor(t, waitLimit, "436 events applied", func() bool { return eventsTotal(agg) >= total })
	if got := eventsTotal(agg); got != total {
		t.Errorf("EventsTotal = %d, want %d", got, total)
	}
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"lockscope_acquisitions_total", nil, 203},
		{"lockscope_releases_total", []string{"outcome", "released"}, 203},
		{"lockscope_acquire_failures_total", []string{"reason", "held"}, 30},
		{"lockscope_acquire_failures_total", nil, 30},
		{"lockscope_contentions_total", nil, 30},
		{"lockscope_held_locks", nil, 0},
		{"lockscope_events_malformed_total", nil, 0},
		{"lockscope_events_dropped_total", nil, 0},
	}
	for _, c := range checks {
		if got := metric(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	hot := agg.HotKeys(time.Minute, state.ByContentions, 10)
	want := []struct {
		key string
		n   int64
	}{{keys[2], 15}, {keys[0], 10}, {keys[1], 5}}
	if len(hot) < len(want) {
		t.Fatalf("HotKeys() = %+v, want at least %d keys", hot, len(want))
	}
	for i, w := range want {
		if hot[i].Key != w.key || hot[i].Contentions != w.n || hot[i].Error != 0 {
			t.Errorf("HotKeys()[%d] = {%q %d ±%d}, want {%q %d ±0}", i, hot[i].Key, hot[i].Contentions, hot[i].Error, w.key, w.n)
		}
	}
	for _, h := range hot[len(want):] {
		if h.Contentions != 0 {
			t.Errorf("HotKeys() has %q with %d contentions, want only the three tried keys contended", h.Key, h.Contentions)
		}
	}
	if d, ok := agg.Lock(keys[7]); !ok || d.Acquisitions != 10 || d.Owner != "worker-a" || d.Passive {
		t.Errorf("Lock(%q) = {Acquisitions:%d Owner:%q Passive:%v}, %v; want 10 by worker-a, not passive", keys[7], d.Acquisitions, d.Owner, d.Passive, ok)
	}
}

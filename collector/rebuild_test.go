package collector

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// startReplica runs a collector as the named replica, with the checkpoint
// written often and for holders older than 300ms, replaying the last 1.5s.
func startReplica(t *testing.T, rdb redis.UniversalClient, agg *state.Aggregator, stream, replica string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := New(rdb, agg, &Options{Stream: stream, Replica: replica, Backfill: 1500 * time.Millisecond})
	c.ckptEvery, c.ckptMinAge = 100*time.Millisecond, 300*time.Millisecond
	r := &running{Follower: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- r.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// picture is what an operator compares between two replicas.
type picture struct {
	held, stuck int
	holders     []string // key owner
	expired     []string
	hot         []string // key contentions
	expirations int64
}

func pictureOf(agg *state.Aggregator) picture {
	var p picture
	o := agg.Overview()
	p.held, p.stuck, p.expirations = o.Held, o.Stuck, o.Expirations5m
	for _, l := range agg.Locks(state.LockQuery{Limit: 500}).Locks {
		if l.Held {
			p.holders = append(p.holders, l.Key+" "+l.Owner)
		}
	}
	slices.Sort(p.holders)
	for _, e := range agg.Expirations(100) {
		p.expired = append(p.expired, e.Key)
	}
	slices.Sort(p.expired)
	for _, h := range agg.HotKeys(5*time.Minute, state.ByContentions, 10) {
		p.hot = append(p.hot, h.Key+" "+strconv.FormatInt(h.Contentions, 10))
	}
	return p
}

func TestRestartedReplicaShowsWhatARunningOneShows(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	cfg := state.Config{StuckAfter: 2 * time.Second}

	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream})
	t.Cleanup(func() { em.Close(ctx) })
	a := lock.New(rdb, &lock.Options{Owner: "worker-a", Recorder: em})
	b := lock.New(rdb, &lock.Options{Owner: "worker-b", Recorder: em})
	flush := func() {
		if err := em.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A holder older than anything the restarted replica will replay.
	old, err := a.Obtain(ctx, prefix+"old", 2*time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	flush()

	keep, _ := testAgg(t, cfg) // the replica that keeps running
	startReplica(t, rdb, keep, stream, "keep")
	agg1, _ := testAgg(t, cfg)
	r1 := startReplica(t, rdb, agg1, stream, "restarted")
	for _, agg := range []*state.Aggregator{keep, agg1} {
		redistest.WaitFor(t, waitLimit, "old holder seen", func() bool { return lockInfo(agg, prefix+"old").Held })
	}

	// An expiry older than the window a restart replays: the checkpoint
	// keeps it.
	if _, err := a.Obtain(ctx, prefix+"expired-long-ago", 100*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	flush()
	redistest.WaitFor(t, waitLimit, "the early expiry seen", func() bool { return len(agg1.Expirations(10)) == 1 })

	// The old holder's acquisition leaves the window a restart replays.
	time.Sleep(1600 * time.Millisecond)

	// A hot key: b's single tries are refused while a holds it.
	hot := prefix + "hot"
	for range 5 {
		l, err := a.Obtain(ctx, hot, time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Obtain(ctx, hot, time.Minute, nil); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("b.Obtain(hot) = %v, want ErrNotObtained", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// An expiry under a holder that never renewed nor released.
	if _, err := a.Obtain(ctx, prefix+"expiring", 200*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	held, err := b.Obtain(ctx, prefix+"held", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	flush()
	redistest.WaitFor(t, waitLimit, "expiry seen", func() bool { return len(agg1.Expirations(10)) == 2 })
	// The checkpoint has the old holder; the old holder's acquisition is
	// out of the replayed window.
	redistest.WaitFor(t, waitLimit, "checkpoint holds the old holder", func() bool {
		// (written after the 300ms the test sets: a holder younger is in
		// the replayed stream)
		v, _ := rdb.Get(ctx, CheckpointKey(stream)).Result()
		return strings.Contains(v, prefix+"old") && strings.Contains(v, prefix+"expired-long-ago")
	})
	r1.stop(t)
	// While the replica is down: one release, one acquisition.
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Obtain(ctx, prefix+"new", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	flush()

	agg2, reg2 := testAgg(t, cfg)
	restartAt := time.Now()
	startReplica(t, rdb, agg2, stream, "restarted")
	redistest.WaitFor(t, waitLimit, "restarted replica ready", func() bool { return agg2.Health() == nil })
	deadline := time.Now().Add(10 * time.Second)
	for !(slices.Equal(pictureOf(keep).holders, pictureOf(agg2).holders) && pictureOf(agg2).stuck == pictureOf(keep).stuck) {
		if time.Now().After(deadline) {
			t.Fatalf("restarted replica shows %+v, the running one %+v", pictureOf(agg2), pictureOf(keep))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// How long the rebuild took is logged (the loop above bounds it): speed
	// is the benchmarks' to measure, not a timed test's.
	t.Logf("rebuilt in %v", time.Since(restartAt).Round(time.Millisecond))
	want, got := pictureOf(keep), pictureOf(agg2)
	if !slices.Equal(got.holders, want.holders) || got.held != want.held || got.stuck != want.stuck {
		t.Errorf("holders after restart = %q (held %d, stuck %d), running replica shows %q (held %d, stuck %d)",
			got.holders, got.held, got.stuck, want.holders, want.held, want.stuck)
	}
	if !slices.Equal(got.expired, want.expired) || got.expirations != want.expirations || got.expirations != 2 {
		t.Errorf("expirations after restart = %q (%d in 5m), running replica shows %q (%d)", got.expired, got.expirations, want.expired, want.expirations)
	}
	if !slices.Equal(got.hot, want.hot) || len(got.hot) == 0 {
		t.Errorf("hot keys after restart = %q, running replica shows %q", got.hot, want.hot)
	}
	for _, l := range keep.Locks(state.LockQuery{HeldOnly: true, Limit: 500}).Locks {
		// The stream's event time and the value's since are two clock
		// readings of the same acquisition, milliseconds apart.
		if d := lockInfo(agg2, l.Key).Since.Sub(l.Since); d < -10*time.Millisecond || d > 10*time.Millisecond {
			t.Errorf("%s held since %v after restart, running replica says %v", l.Key, lockInfo(agg2, l.Key).Since, l.Since)
		}
	}
	li := lockInfo(agg2, prefix+"old")
	if d := li.Since.Sub(old.Since()); d < -time.Millisecond || d > time.Millisecond || !li.Stuck {
		t.Errorf("old holder after restart: since %v stuck %v, want since %v (the true one), stuck", li.Since, li.Stuck, old.Since())
	}
	// Counters count only what the previous incarnation never saw: the
	// acquisition made while it was down. Nothing expired twice.
	if n := metric(t, reg2, "lockscope_acquisitions_total"); n != 1 {
		t.Errorf("lockscope_acquisitions_total after restart = %v, want 1 (only the acquisition made while down)", n)
	}
	if n := metric(t, reg2, "lockscope_expirations_total"); n != 0 {
		t.Errorf("lockscope_expirations_total after restart = %v, want 0 (the expiry was counted before)", n)
	}
	if n := metric(t, reg2, "lockscope_releases_total"); n != 1 {
		t.Errorf("lockscope_releases_total after restart = %v, want 1", n)
	}
}

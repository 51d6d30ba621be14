package reliability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// guardWrite is the guarded resource: a write that checks the fencing token
// (when ARGV[3] is "1") and, in the same atomic step, classifies the write
// by the ground truth in Redis, independently of fences:
//
//	holder   the lock key holds the writer's lease
//	stale    the lock key holds another lease that has already written:
//	         a successor took over and the writer is late
//	expired  the key is gone, or held by a successor that has not written yet
//
// KEYS[1] resource hash (highest accepted fence "hi", outcome counters)
// KEYS[2] lock key
// KEYS[3] set of lease ids whose writes were accepted
// ARGV[1] fence, ARGV[2] lease id, ARGV[3] "1" to enforce fences
//
// Returns "<accepted|rejected>_<holder|stale|expired>".
var guardWrite = redis.NewScript(`
local v = redis.call('GET', KEYS[2])
local cur = v and string.match(v, '^ls1|[^|]*|([^|]*)|')
local class = 'expired'
if cur == ARGV[2] then
  class = 'holder'
elseif cur and redis.call('SISMEMBER', KEYS[3], cur) == 1 then
  class = 'stale'
end
local hi = tonumber(redis.call('HGET', KEYS[1], 'hi') or '0')
local f = tonumber(ARGV[1])
local ok = ARGV[3] ~= '1' or f >= hi
local outcome = 'rejected_' .. class
if ok then
  outcome = 'accepted_' .. class
  if f > hi then redis.call('HSET', KEYS[1], 'hi', ARGV[1]) end
  redis.call('SADD', KEYS[3], ARGV[2])
end
redis.call('HINCRBY', KEYS[1], outcome, 1)
return outcome
`)

// holderConfig configures a holder helper process.
type holderConfig struct {
	Addr, Key, Res, Writers, Stream, Owner string
	TTL, Work                              time.Duration
	Fencing                                bool
}

type holderResult struct {
	Rounds  int
	Dropped uint64
}

// holderMain is a lock holder in its own process: it takes the lock with
// auto-renewal, writes to the guarded resource, works a little, writes
// again and releases, until SIGTERM. It never checks whether it still holds
// the lock before writing: a pause can come after any check anyway, which
// is why the resource needs fencing.
func holderMain(ctx context.Context, raw []byte) (any, error) {
	var cfg holderConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.Addr})
	defer rdb.Close()
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: cfg.Stream, MaxLen: -1})
	client := lock.New(rdb, &lock.Options{Recorder: em, Owner: cfg.Owner})
	check := "0"
	if cfg.Fencing {
		check = "1"
	}
	bg := context.Background()
	write := func(l *lock.Lease) error {
		wctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		return guardWrite.Run(wctx, rdb, []string{cfg.Res, cfg.Key, cfg.Writers}, l.Fence(), l.ID(), check).Err()
	}
	var res holderResult
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := client.Obtain(octx, cfg.Key, cfg.TTL, &lock.ObtainOptions{
			Retry: lock.LinearBackoff(2 * time.Millisecond), Fencing: cfg.Fencing, AutoRenew: true,
		})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return nil, fmt.Errorf("%s: Obtain: %w", cfg.Owner, err)
		}
		res.Rounds++
		if err := write(l); err != nil {
			return nil, err
		}
		time.Sleep(cfg.Work)
		if err := write(l); err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(bg, 5*time.Second)
		l.Release(rctx) // ErrNotHeld after a pause: the lease reports it
		cancel()
	}
	cctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	if err := em.Close(cctx); err != nil {
		return nil, err
	}
	res.Dropped = em.Stats().Dropped
	return res, nil
}

// pauseRun is one run of holder processes paused (SIGSTOP) past their TTL
// while they hold the lock, as a long GC pause or a stopped VM would.
type pauseRun struct {
	fencing  bool
	holders  int
	ttl      time.Duration
	work     time.Duration
	pause    time.Duration
	duration time.Duration
}

// pause is one SIGSTOP of the holder of lease, confirmed to hold it while
// stopped; successor is the lease that held the key when it was resumed.
type pause struct {
	lease, successor, owner string
	from, to                time.Time // stopped, resumed
}

type pauseResult struct {
	outcomes    map[string]int
	pauses      []pause
	forced      map[string]bool // leases removed by the operator
	forcedStale int
	events      []event.Event
	agg         *state.Aggregator
	metrics     families
	key         string
}

func (r pauseRun) run(t *testing.T) pauseResult {
	t.Helper()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	p := redistest.KeyPrefix(t)
	// One hash tag: the guarded write's keys would share a slot on a cluster.
	key, res, writers, stream := p+"{job}:lock", p+"{job}:res", p+"{job}:writers", p+"events"
	ctx := testCtx(t, r.duration+30*time.Second)

	// The collector watches the whole run, as in production.
	agg, reg := newAggregator(t, state.Config{})
	colCtx, stopCollector := context.WithCancel(ctx)
	colDone := make(chan error, 1)
	go func() {
		colDone <- collector.New(rdb, agg, &collector.Options{Stream: stream, Logger: quietLog()}).Run(colCtx)
	}()
	defer func() { stopCollector(); <-colDone }()

	procs := make(map[string]*helperProc)
	for i := 0; i < r.holders; i++ {
		owner := fmt.Sprintf("holder-%d", i)
		procs[owner] = startHelper(t, "holder", holderConfig{Addr: srv.Addr(), Key: key, Res: res, Writers: writers,
			Stream: stream, Owner: owner, TTL: r.ttl, Work: r.work, Fencing: r.fencing})
	}
	opEm := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream, MaxLen: -1})
	op := lock.New(rdb, &lock.Options{Owner: "operator", Recorder: opEm})
	var out pauseResult
	out.forced = make(map[string]bool)

	// The operator force-releases what it saw, a little later, now and then.
	var opWG sync.WaitGroup
	opCtx, stopOp := context.WithCancel(ctx)
	opWG.Add(1)
	go func() {
		defer opWG.Done()
		for opCtx.Err() == nil {
			redistest.Sleep(opCtx, 300*time.Millisecond)
			seen, err := op.Inspect(opCtx, key)
			if err != nil {
				continue
			}
			redistest.Sleep(opCtx, time.Duration(rand.Int64N(int64(r.ttl))))
			got, err := op.ForceRelease(opCtx, key, seen.Fingerprint, "operator", "reliability test")
			switch {
			case err == nil:
				out.forced[got.Lease] = true
				if got.Lease != seen.Lease {
					t.Errorf("ForceRelease(fingerprint of lease %s) removed lease %s: a newer holder was evicted", seen.Lease, got.Lease)
				}
			case errors.Is(err, lock.ErrOwnerChanged):
				out.forcedStale++
				if got == nil || got.Lease == seen.Lease {
					t.Errorf("ForceRelease = %+v, ErrOwnerChanged; want the new holder, not lease %s", got, seen.Lease)
				}
			case errors.Is(err, lock.ErrNotHeld), opCtx.Err() != nil:
			default:
				t.Errorf("ForceRelease: %v", err)
			}
		}
	}()

	stop := time.Now().Add(r.duration)
	for time.Now().Before(stop) && ctx.Err() == nil {
		redistest.Sleep(ctx, time.Duration(50+rand.IntN(100))*time.Millisecond)
		h, err := op.Inspect(ctx, key)
		if err != nil {
			continue
		}
		proc := procs[h.Owner]
		if proc == nil {
			t.Fatalf("Inspect(%q) owner = %q, want one of the holders", key, h.Owner)
		}
		proc.signal(syscall.SIGSTOP)
		// Only a pause that caught the holder holding counts. kill returns
		// before every thread has stopped, and a command the holder wrote
		// just before may still be on its way to Redis: wait for both.
		if err := waitStopped(proc.cmd.Process.Pid, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		// Stopped, it writes nothing more; what it wrote is readable, so
		// Redis has read it by the time it answers the second of two round
		// trips (a PING, then the Inspect).
		rdb.Ping(ctx)
		if h2, err := op.Inspect(ctx, key); err != nil || h2.Lease != h.Lease {
			proc.signal(syscall.SIGCONT)
			continue
		}
		pp := pause{lease: h.Lease, owner: h.Owner, from: time.Now()}
		redistest.Sleep(ctx, r.pause)
		if h2, err := op.Inspect(ctx, key); err == nil {
			pp.successor = h2.Lease
		}
		proc.signal(syscall.SIGCONT)
		pp.to = time.Now()
		out.pauses = append(out.pauses, pp)
	}
	stopOp()
	opWG.Wait()
	for owner, proc := range procs {
		var hr holderResult
		proc.stop(t, 15*time.Second, &hr)
		if hr.Rounds == 0 || hr.Dropped != 0 {
			t.Errorf("%s: %d rounds, %d events dropped; want > 0 rounds and no drops", owner, hr.Rounds, hr.Dropped)
		}
	}
	counts, err := rdb.HGetAll(ctx, res).Result()
	if err != nil {
		t.Fatal(err)
	}
	out.outcomes = make(map[string]int)
	for k, v := range counts {
		if k != "hi" {
			n, _ := strconv.Atoi(v)
			out.outcomes[k] = n
		}
	}
	// The operator's emitter: flush its forced events.
	if err := opEm.Close(ctx); err != nil {
		t.Fatal(err)
	}
	out.events = redistest.ReadStream(t, rdb, stream).Events
	want := float64(len(out.events))
	if !redistest.Poll(ctx, func() bool { return gather(t, reg).sum("lockscope_events_total") >= want }) {
		t.Fatalf("collector applied %v events, want %v", gather(t, reg).sum("lockscope_events_total"), want)
	}
	// The collector's expiry detection (ExpiryGrace 1s) decides the last
	// holds: wait until it lists every pause that cost its holder the lock
	// (checkReported names any it never lists).
	redistest.Poll(testCtx(t, 15*time.Second), func() bool {
		exps := agg.Expirations(0)
		for _, p := range out.pauses {
			if p.successor != "" && p.successor != p.lease && !out.forced[p.lease] && expirationOf(exps, p) == nil {
				return false
			}
		}
		return true
	})
	out.agg, out.metrics, out.key = agg, gather(t, reg), key
	t.Logf("fencing=%v pauses=%d forced=%d (refused %d) outcomes=%v", r.fencing, len(out.pauses), len(out.forced), out.forcedStale, out.outcomes)
	return out
}

func pauseWorkload(fencing bool) pauseRun {
	return pauseRun{
		fencing:  fencing,
		holders:  3,
		ttl:      100 * time.Millisecond,
		work:     30 * time.Millisecond,
		pause:    350 * time.Millisecond,
		duration: 4 * time.Second,
	}
}

// TestPausedHoldersWithFencing: holder processes are stopped past their TTL
// while holding; others take over; the resource enforces fencing tokens. No
// stale write may be accepted, no write by the current holder may be
// rejected (that would mean fences out of order), and the hazard must have
// occurred. lockscope must report every loss.
func TestPausedHoldersWithFencing(t *testing.T) {
	t.Parallel()
	r := pauseWorkload(true).run(t)
	o := r.outcomes
	if o["accepted_stale"] != 0 {
		t.Errorf("stale writes accepted = %d, want 0 with fencing", o["accepted_stale"])
	}
	if o["rejected_holder"] != 0 {
		t.Errorf("writes by the current holder rejected = %d, want 0 (fences must increase with every obtain)", o["rejected_holder"])
	}
	if o["rejected_stale"] == 0 {
		t.Errorf("stale writes rejected = 0: the run never produced the hazard it tests (%d pauses)", len(r.pauses))
	}
	checkReported(t, r)
}

// TestPausedHoldersWithoutFencing is the same run with a resource that does
// not check fences: stale writes get through, and lockscope reports the
// losses that caused them.
func TestPausedHoldersWithoutFencing(t *testing.T) {
	t.Parallel()
	r := pauseWorkload(false).run(t)
	if got := r.outcomes["accepted_stale"]; got == 0 {
		t.Errorf("stale writes accepted without fencing = 0, want > 0 (%d pauses): the hazard did not show", len(r.pauses))
	}
	checkReported(t, r)
}

// checkReported checks that lockscope told the story of every pause that
// cost its holder the lock: the lease reported the loss (lost, or released
// with reason not_owner if the release ran before the renewer noticed),
// and the collector counted the hold as expired unless the operator forced
// it.
func checkReported(t *testing.T, r pauseResult) {
	t.Helper()
	reported := make(map[string]bool)
	var lost int
	for _, e := range r.events {
		switch {
		case e.Type == event.Lost:
			// not_owner when the renewal reached Redis and found another
			// holder; error when the renewer gave up at the lock's validity
			// before hearing back (it woke up past it).
			lost++
			reported[e.Lease] = true
		case e.Type == event.Released && e.Reason == event.ReasonNotOwner:
			reported[e.Lease] = true
		}
	}
	exps := r.agg.Expirations(0)
	expiredFor := func(p pause) bool {
		x := expirationOf(exps, p)
		if x != nil && x.Lease != p.lease {
			t.Logf("lease %s's expiration during its pause is credited to lease %s of the same owner %s", p.lease, x.Lease, x.Owner)
		}
		return x != nil
	}
	takenOver := 0
	for _, p := range r.pauses {
		if p.successor == "" || p.successor == p.lease {
			continue
		}
		takenOver++
		if !reported[p.lease] {
			t.Errorf("lease %s lost its lock to %s during a pause, but no lost or released/not_owner event names it", p.lease, p.successor)
		}
		if !r.forced[p.lease] && !expiredFor(p) {
			t.Errorf("lease %s expired while paused, but the collector's expirations do not list it", p.lease)
			var from, to int64
			for _, e := range r.events {
				if e.Lease == p.lease && e.Type == event.Acquired {
					from = e.TS - int64(200*time.Millisecond)
				}
				if e.Lease == p.lease {
					to = e.TS + int64(300*time.Millisecond)
				}
			}
			for _, e := range r.events {
				if e.TS >= from && e.TS <= to {
					t.Logf("  stream: %s lease %s owner %s ts %d ttl %v reason %q", e.Type, e.Lease, e.Owner, e.TS, e.TTL, e.Reason)
				}
			}
			for _, x := range r.agg.Expirations(0) {
				t.Logf("  collector expiration: lease %s owner %s at %d held %v confirmed %v", x.Lease, x.Owner, x.At.UnixNano(), x.Held, x.Confirmed)
			}
		}
	}
	if takenOver == 0 || lost == 0 {
		t.Errorf("pauses that lost the lock = %d, lost events = %d; want both > 0", takenOver, lost)
	}
	if got := r.metrics.sum("lockscope_events_total", "type", "lost"); got != float64(lost) {
		t.Errorf("lockscope_events_total{type=\"lost\"} = %v, want %d", got, lost)
	}
	if got := r.metrics.sum("lockscope_expirations_total"); got < float64(takenOver-len(r.forced)) || got == 0 {
		t.Errorf("lockscope_expirations_total = %v, want >= %d pauses that lost the lock less %d forced", got, takenOver, len(r.forced))
	}
}

// expirationOf returns the collector's record of the pause's expiration: by
// lease, or, when the paused process's events arrived late, by owner and
// time (a keyspace notification names only the key, and is credited to the
// hold the collector knows of at that moment: an earlier hold of the same
// process whose release was still in the paused process's buffer); nil if
// it has none.
func expirationOf(exps []state.Expiration, p pause) *state.Expiration {
	for i, x := range exps {
		if x.Lease == p.lease {
			return &exps[i]
		}
	}
	for i, x := range exps {
		if x.Owner == p.owner && !x.At.Before(p.from.Add(-time.Second)) && !x.At.After(p.to.Add(time.Second)) {
			return &exps[i]
		}
	}
	return nil
}

// waitStopped waits until every thread of process pid is stopped.
func waitStopped(pid int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		stopped := true
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				continue // the thread exited
			}
			// pid (comm) state ...: comm may hold spaces, the state follows the last ')'.
			st := string(b)
			if i := strings.LastIndexByte(st, ')'); i < 0 || i+2 >= len(st) || (st[i+2] != 'T' && st[i+2] != 't') {
				stopped = false
				break
			}
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped %v after SIGSTOP", pid, within)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStaleHolderNeverTouchesSuccessor walks the pause hazard step by step:
// A pauses past its TTL, B takes the lock; A's Refresh, Release and an
// operator's forced release made with what the operator saw of A must all
// leave B's lock as it is.
func TestStaleHolderNeverTouchesSuccessor(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := testCtx(t, 30*time.Second)
	key := redistest.KeyPrefix(t) + "lock"
	c := lock.New(rdb, nil)
	const ttl = time.Second // the Inspect below must find A's lock on a loaded host

	a, err := c.Obtain(ctx, key, ttl, &lock.ObtainOptions{Fencing: true, Owner: "A"})
	if err != nil {
		t.Fatal(err)
	}
	seenA, err := c.Inspect(ctx, key)
	if err != nil || seenA.Lease != a.ID() {
		t.Fatalf("Inspect(%q) = %+v, %v; want lease %s", key, seenA, err, a.ID())
	}
	// A pauses past its TTL: the key expires.
	redistest.WaitFor(t, 20*time.Second, "A's lock expired", func() bool { return rdb.Exists(ctx, key).Val() == 0 })
	b, err := c.Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Fencing: true, Owner: "B"})
	if err != nil {
		t.Fatalf("Obtain by B after A's TTL: %v", err)
	}
	if b.Fence() <= a.Fence() {
		t.Errorf("B.Fence() = %d, want > A.Fence() = %d", b.Fence(), a.Fence())
	}
	valueB := rdb.Get(ctx, key).Val()

	if err := a.Refresh(ctx, time.Hour); !errors.Is(err, lock.ErrLost) {
		t.Errorf("A.Refresh after pause = %v, want ErrLost", err)
	}
	if pttl := rdb.PTTL(ctx, key).Val(); pttl > time.Minute {
		t.Errorf("PTTL after A.Refresh(1h) = %v, want <= B's 1m", pttl)
	}
	if _, err := a.TTL(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("A.TTL = %v, want ErrLost", err)
	}
	if err := a.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("A.Release after pause = %v, want ErrNotHeld", err)
	}
	if got := rdb.Get(ctx, key).Val(); got != valueB {
		t.Fatalf("value after A's Refresh and Release = %q, want B's %q", got, valueB)
	}

	got, err := c.ForceRelease(ctx, key, seenA.Fingerprint, "op", "stuck")
	if !errors.Is(err, lock.ErrOwnerChanged) {
		t.Fatalf("ForceRelease(A's fingerprint) = %v, want ErrOwnerChanged", err)
	}
	if got == nil || got.Lease != b.ID() || got.Owner != "B" {
		t.Errorf("ForceRelease returned holder %+v, want B (lease %s)", got, b.ID())
	}
	if h, err := c.Inspect(ctx, key); err != nil || h.Lease != b.ID() {
		t.Fatalf("Inspect after refused ForceRelease = %+v, %v; want B still holding", h, err)
	}
	if err := b.Err(); err != nil {
		t.Errorf("B.Err() = %v, want nil", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Errorf("B.Release = %v, want nil", err)
	}
}

// Package workload simulates the lock users lockscope is built for, through
// the instrumented lock library: a cron job racing across replicas,
// double-clicked payment submits, workflow editing sessions, an inventory
// hot key, and the three ways holders go wrong (a hang while renewing, a
// crash without release, a pause past the TTL). The demo and `lockscope
// load` run it; the tests use it as a source of realistic events.
package workload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
)

// Scenario names, as accepted by Options.Scenarios.
const (
	Cron      = "cron"      // nightly report job on 5 replicas: exactly one runs each tick
	Payments  = "payments"  // double-clicked submits: two tries, one refused
	Workflow  = "workflow"  // editing sessions held for seconds, renewing
	Inventory = "inventory" // a few hot SKUs under heavy contention, obtain with retry
	Stuck     = "stuck"     // an export worker that hangs while its lock keeps renewing, other pods queue behind it
	Crash     = "crash"     // a batch job that dies holding its lock: the TTL expires it
	Pause     = "pause"     // a sync job paused past its TTL: it finds its lock lost
	Deadlock  = "deadlock"  // two services take two locks in opposite orders: a deadlock until a wait times out
)

// Scenarios lists every scenario in the order they are described.
var Scenarios = []string{Cron, Payments, Workflow, Inventory, Stuck, Crash, Pause, Deadlock}

// Options configures a Simulator. The zero value runs every scenario at the
// demo's pace until the context ends.
type Options struct {
	// Rate is the lock attempts per second of the traffic scenarios
	// (payments and inventory); 0 means 50. The others run at human pace,
	// set by Speed.
	Rate float64
	// Concurrency is how many simulated clients of the traffic scenarios
	// work at once; 0 means 8. When all are busy the achieved rate falls
	// below Rate, as it would for real callers.
	Concurrency int
	// Duration is how long Run lasts; 0 means until its context ends.
	Duration time.Duration
	// Scenarios names the scenarios to run; nil means all of Scenarios.
	Scenarios []string
	// Speed compresses the human-paced scenarios' clocks (cron ticks,
	// editing sessions, hangs, crashes, pauses and their TTLs); 0 means 1,
	// the demo's pace, and 10 runs them ten times faster.
	Speed float64
	// HangUntilReleased keeps the stuck scenario's hung holder until an
	// operator force-releases its lock (the demo); otherwise a watchdog ends
	// each hang after 90 s at Speed 1.
	HangUntilReleased bool
	// KeyPrefix is put in front of every key, to keep runs apart.
	KeyPrefix string
	// Seed makes the random choices repeatable; 0 means a random seed.
	Seed uint64
	// Logger receives what the scenarios do at debug level; nil discards.
	Logger *slog.Logger
}

// Stats counts what a Simulator did. Every attempt ends in exactly one of
// Acquired, Refused, TimedOut or Errors.
type Stats struct {
	Attempts  int64 // Try and Obtain calls
	Acquired  int64 // attempts that got the lock
	Refused   int64 // single tries that found the lock held
	TimedOut  int64 // obtains with retry that gave up at their deadline
	Errors    int64 // attempts, renewals or releases that failed with an error
	Released  int64 // holds ended by Release
	Lost      int64 // holders that found their lock gone or taken over
	Abandoned int64 // holds left to expire (crash scenario)

	CronTicks      int64 // ticks at which the replicas raced
	CronRuns       int64 // ticks a replica ran the job
	CronDoubleRuns int64 // ticks more than one replica ran the job: must stay 0
	Payments       int64 // submits (each clicked twice)
	DoubleCharges  int64 // submits charged twice: must stay 0
	Sessions       int64 // editing sessions opened
	Hangs          int64 // holders that hung while renewing
	Crashes        int64 // holders that died holding their lock
	Pauses         int64 // holders paused past their TTL
	Deadlocks      int64 // deadlocks formed (each resolved by a wait timing out)
	Overlaps       int64 // two holders at once the pause scenario caused (each logged: "workload: overlap")
}

// Simulator runs the scenarios through the lock library.
type Simulator struct {
	c     *lock.Client
	pc    *lock.Client // the paused holder's client: its own connections, which a pause stalls
	pdb   redis.UniversalClient
	stall *stall
	opt   Options
	log   *slog.Logger
	seed  uint64
	seeds atomic.Uint64

	attempts, acquired, refused, timedOut, errs atomic.Int64
	released, lost, abandoned                   atomic.Int64
	cronTicks, cronRuns, cronDouble             atomic.Int64
	payments, doubleCharges, sessions           atomic.Int64
	hangs, crashes, pauses, deadlocks           atomic.Int64
	overlaps                                    atomic.Int64

	guard *lock.FenceGuard // the ledger accounts' (pause scenario)
}

// New returns a Simulator taking locks in rdb and reporting their events to
// rec (nil: no events). opt may be nil. The pause scenario opens its own
// connections to the same Redis (see stall); Run closes them.
func New(rdb redis.UniversalClient, rec lock.Recorder, opt *Options) (*Simulator, error) {
	var o Options
	if opt != nil {
		o = *opt
	}
	if o.Rate < 0 || o.Concurrency < 0 || o.Speed < 0 || o.Duration < 0 {
		return nil, errors.New("workload: rate, concurrency, speed and duration must not be negative")
	}
	if o.Rate == 0 {
		o.Rate = 50
	}
	if o.Concurrency == 0 {
		o.Concurrency = 8
	}
	if o.Speed == 0 {
		o.Speed = 1
	}
	if o.Scenarios == nil {
		o.Scenarios = Scenarios
	}
	for _, s := range o.Scenarios {
		if !slices.Contains(Scenarios, s) {
			return nil, fmt.Errorf("workload: unknown scenario %q (want some of %v)", s, Scenarios)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	seed := o.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	s := &Simulator{c: lock.New(rdb, &lock.Options{Recorder: rec, TraceContext: traceContext}), opt: o, log: o.Logger, seed: seed,
		guard: lock.NewFenceGuard(rdb, &lock.GuardOptions{Recorder: rec})}
	if slices.Contains(o.Scenarios, Pause) {
		s.stall = &stall{}
		p := stalled(rdb, s.stall)
		if p != rdb {
			s.pdb = p // ours to close
		}
		s.pc = lock.New(p, &lock.Options{Recorder: rec, TraceContext: traceContext})
	}
	return s, nil
}

// Stats returns the counters so far; safe to call while Run is running.
func (s *Simulator) Stats() Stats {
	return Stats{
		Attempts:       s.attempts.Load(),
		Acquired:       s.acquired.Load(),
		Refused:        s.refused.Load(),
		TimedOut:       s.timedOut.Load(),
		Errors:         s.errs.Load(),
		Released:       s.released.Load(),
		Lost:           s.lost.Load(),
		Abandoned:      s.abandoned.Load(),
		CronTicks:      s.cronTicks.Load(),
		CronRuns:       s.cronRuns.Load(),
		CronDoubleRuns: s.cronDouble.Load(),
		Payments:       s.payments.Load(),
		DoubleCharges:  s.doubleCharges.Load(),
		Sessions:       s.sessions.Load(),
		Hangs:          s.hangs.Load(),
		Crashes:        s.crashes.Load(),
		Pauses:         s.pauses.Load(),
		Overlaps:       s.overlaps.Load(),
		Deadlocks:      s.deadlocks.Load(),
	}
}

// Run runs the scenarios until ctx ends or Options.Duration has passed, then
// releases every lock still held (except the crashed ones, which expire) and
// returns. Lock errors are counted, not returned: the simulator keeps going
// through a Redis outage as real callers would. Run may be called once.
func (s *Simulator) Run(ctx context.Context) error {
	if s.opt.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opt.Duration)
		defer cancel()
	}
	runners := map[string]func(context.Context){
		Cron:      s.cron,
		Workflow:  s.workflow,
		Stuck:     s.stuck,
		Crash:     s.crash,
		Pause:     s.pause,
		Deadlock:  s.deadlock,
		Payments:  nil, // both run inside traffic
		Inventory: nil,
	}
	var wg sync.WaitGroup
	for _, name := range s.opt.Scenarios {
		if run := runners[name]; run != nil {
			wg.Go(func() { run(ctx) })
		}
	}
	if s.has(Payments) || s.has(Inventory) {
		wg.Go(func() { s.traffic(ctx) })
	}
	wg.Wait()
	if s.pdb != nil {
		s.pdb.Close()
	}
	return nil
}

func (s *Simulator) has(name string) bool { return slices.Contains(s.opt.Scenarios, name) }

// rng returns a generator for one goroutine: math/rand/v2 generators are
// not safe for concurrent use.
func (s *Simulator) rng() *rand.Rand {
	return rand.New(rand.NewPCG(s.seed, s.seeds.Add(1)))
}

// scaled returns d compressed by Speed, never below a millisecond.
func (s *Simulator) scaled(d time.Duration) time.Duration {
	return max(time.Duration(float64(d)/s.opt.Speed), time.Millisecond)
}

func (s *Simulator) key(k string) string { return s.opt.KeyPrefix + k }

// between returns a random duration in [lo, hi).
func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}

// try makes one attempt and counts its outcome.
func (s *Simulator) try(ctx context.Context, key string, ttl time.Duration, opt *lock.ObtainOptions) *lock.Lease {
	return s.tryWith(s.c, ctx, key, ttl, opt)
}

func (s *Simulator) tryWith(c *lock.Client, ctx context.Context, key string, ttl time.Duration, opt *lock.ObtainOptions) *lock.Lease {
	s.attempts.Add(1)
	ctx = inSpan(ctx)
	l, _, err := c.Try(ctx, key, ttl, opt)
	s.count(ctx, "try", key, err)
	return l
}

// obtain waits for the lock until ctx ends and counts the outcome.
func (s *Simulator) obtain(ctx context.Context, key string, ttl time.Duration, opt *lock.ObtainOptions) *lock.Lease {
	s.attempts.Add(1)
	ctx = inSpan(ctx)
	l, err := s.c.Obtain(ctx, key, ttl, opt)
	s.count(ctx, "obtain", key, err)
	return l
}

func (s *Simulator) count(ctx context.Context, op, key string, err error) {
	if err == nil {
		s.acquired.Add(1)
		return
	}
	reason := event.ReasonError
	var ne *lock.NotObtainedError
	if errors.As(err, &ne) {
		reason = ne.Reason
	}
	switch {
	case reason == event.ReasonHeld:
		s.refused.Add(1)
	case reason == event.ReasonTimeout, reason == event.ReasonCanceled, ctx.Err() != nil:
		s.timedOut.Add(1)
	default:
		s.fail(ctx, op, key, err)
	}
}

// release ends a hold. It runs after ctx may have ended, so it gets its own
// short deadline: a simulator that stops releases what it holds.
func (s *Simulator) release(l *lock.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := l.Release(ctx)
	switch {
	case err == nil:
		s.released.Add(1)
	case errors.Is(err, lock.ErrLost), errors.Is(err, lock.ErrNotHeld):
		s.lost.Add(1)
	default:
		s.fail(ctx, "release", l.Key(), err)
	}
}

func (s *Simulator) fail(ctx context.Context, op, key string, err error) {
	s.errs.Add(1)
	if ctx.Err() == nil {
		s.log.Debug("workload: lock call failed", "op", op, "key", key, "err", err)
	}
}

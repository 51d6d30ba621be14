package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/cmd/lockscope/internal/workload"
	"github.com/lockscope/lockscope/lock"
)

// loadConfig is the simulator flags shared by load and demo.
type loadConfig struct {
	rate        float64
	concurrency int
	duration    time.Duration
	scenarios   []string
	speed       float64
	keyPrefix   string
	// hangUntilReleased: the demo's hung export worker stays stuck until an
	// operator releases it; load's ends after 90 s.
	hangUntilReleased bool
}

func (c *loadConfig) define(f *flagSet, rate float64, concurrency int) {
	f.Float(&c.rate, "rate", "LOCKSCOPE_LOAD_RATE", rate, "lock attempts per second of the traffic scenarios (payments, inventory)")
	f.Int(&c.concurrency, "concurrency", "LOCKSCOPE_LOAD_CONCURRENCY", concurrency, "simulated clients of the traffic scenarios working at once")
	f.Duration(&c.duration, "duration", "LOCKSCOPE_LOAD_DURATION", 0, "stop after this long (0: until interrupted)")
	f.List(&c.scenarios, "scenarios", "LOCKSCOPE_LOAD_SCENARIOS", workload.Scenarios, "scenarios to run (all: every one)")
	f.Float(&c.speed, "speed", "LOCKSCOPE_LOAD_SPEED", 1, "time compression of the human-paced scenarios (cron ticks, editing sessions, hangs, crashes, pauses)")
	f.String(&c.keyPrefix, "key-prefix", "LOCKSCOPE_LOAD_KEY_PREFIX", "", "prefix for every simulated lock key")
}

// validate checks the flags before anything connects.
func (c *loadConfig) validate() error {
	if c.rate <= 0 || c.concurrency <= 0 || c.speed <= 0 || c.duration < 0 {
		return &Error{Code: ExitUsage, Err: fmt.Errorf("--rate, --concurrency and --speed must be positive and --duration not negative")}
	}
	if slices.Contains(c.scenarios, "all") {
		// The default, as the help and docs/configuration.md name it.
		c.scenarios = slices.Clone(workload.Scenarios)
	}
	for _, s := range c.scenarios {
		if !slices.Contains(workload.Scenarios, s) {
			return &Error{Code: ExitUsage, Err: fmt.Errorf("unknown scenario %q: want some of %s (LOCKSCOPE_LOAD_SCENARIOS)", s, strings.Join(workload.Scenarios, ","))}
		}
	}
	if len(c.scenarios) == 0 {
		return &Error{Code: ExitUsage, Err: fmt.Errorf("no scenarios: want some of %s (LOCKSCOPE_LOAD_SCENARIOS)", strings.Join(workload.Scenarios, ","))}
	}
	return nil
}

func (c *loadConfig) simulator(rdb redis.UniversalClient, rec lock.Recorder, log *slog.Logger) (*workload.Simulator, error) {
	sim, err := workload.New(rdb, rec, &workload.Options{
		Rate:        c.rate,
		Concurrency: c.concurrency,
		Duration:    c.duration,
		Scenarios:   c.scenarios,
		Speed:       c.speed,
		KeyPrefix:   c.keyPrefix,
		Logger:      log,

		HangUntilReleased: c.hangUntilReleased,
	})
	if err != nil {
		return nil, &Error{Code: ExitUsage, Err: err}
	}
	return sim, nil
}

func loadCommand() *command {
	return &command{
		name:  "load",
		short: "run the simulated lock users against a Redis, printing achieved rates",
		long: `Load runs the demo's workload against a real Redis through the instrumented lock
library, writing its events to the stream: a cron job racing across 5 replicas,
double-clicked payment submits, workflow editing sessions, an inventory hot
key under heavy contention, and the holders that go wrong (one hangs while
renewing, one crashes without releasing, one is paused past its TTL).
Every --report-every it prints the achieved rates; at the end, the totals.
On SIGINT or SIGTERM it stops, releases what it holds and flushes its events.`,
		define: func(f *flagSet) func(context.Context, *Env, []string) error {
			var rc redisConfig
			var ld loadConfig
			var lg logConfig
			var every, grace time.Duration
			rc.defineConn(f)
			rc.defineStream(f, "Redis stream the events are written to")
			ld.define(f, 100, 16)
			f.Duration(&every, "report-every", "LOCKSCOPE_LOAD_REPORT_EVERY", 5*time.Second, "how often to print the achieved rates (0: only the totals)")
			f.Duration(&grace, "shutdown-timeout", "LOCKSCOPE_SHUTDOWN_TIMEOUT", 10*time.Second, "how long shutdown waits for the event flush")
			lg.define(f)
			return func(ctx context.Context, env *Env, _ []string) error {
				if err := ld.validate(); err != nil {
					return err
				}
				if err := rc.checkPartitions(); err != nil {
					return err
				}
				log, err := lg.logger(env)
				if err != nil {
					return err
				}
				rdb, err := rc.connect(ctx)
				if err != nil {
					return err
				}
				defer rdb.Close()
				return runLoad(ctx, env, log, rdb, rc, ld, every, grace)
			}
		},
	}
}

func runLoad(ctx context.Context, env *Env, log *slog.Logger, rdb redis.UniversalClient, rc redisConfig, ld loadConfig, every, grace time.Duration) error {
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: rc.stream, Partitions: rc.partitions, Owner: "lockscope-load", Logger: log})
	sim, err := ld.simulator(rdb, em, log)
	if err != nil {
		closeEmitter(em, grace)
		return err
	}
	fmt.Fprintf(env.Stdout, "load: %s against %s, events to %s, %.0f attempts/s over %d clients\n",
		strings.Join(ld.scenarios, ","), redactURL(rc.url), rc.stream, ld.rate, ld.concurrency)

	done := make(chan struct{})
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		if every > 0 {
			report(env.Stdout, sim, em, every, done)
		}
	}()
	err = sim.Run(ctx)
	close(done)
	<-reported
	// The simulator has released what it holds; now every event it caused
	// must reach the stream before we exit.
	cerr := closeEmitter(em, grace)
	printTotals(env.Stdout, sim.Stats(), em.Stats())
	if err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("flushing events to %s: %w", rc.stream, cerr)
	}
	return nil
}

// report prints the rates achieved over each interval until done.
func report(w io.Writer, sim *workload.Simulator, em *lock.Emitter, every time.Duration, done <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	start := time.Now()
	prev, prevAt := sim.Stats(), start
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			cur, es := sim.Stats(), em.Stats()
			secs := now.Sub(prevAt).Seconds()
			rate := func(a, b int64) float64 { return float64(a-b) / secs }
			fmt.Fprintf(w, "%6s  attempts=%.1f/s acquired=%.1f/s refused=%.1f/s timed_out=%.1f/s errors=%.1f/s  lost=%d abandoned=%d  events_sent=%d dropped=%d\n",
				now.Sub(start).Round(time.Second),
				rate(cur.Attempts, prev.Attempts), rate(cur.Acquired, prev.Acquired), rate(cur.Refused, prev.Refused),
				rate(cur.TimedOut, prev.TimedOut), rate(cur.Errors, prev.Errors),
				cur.Lost, cur.Abandoned, es.Sent, es.Dropped)
			prev, prevAt = cur, now
		}
	}
}

func printTotals(w io.Writer, s workload.Stats, es lock.EmitterStats) {
	fmt.Fprintf(w, "total: attempts=%d acquired=%d refused=%d timed_out=%d errors=%d released=%d lost=%d abandoned=%d\n",
		s.Attempts, s.Acquired, s.Refused, s.TimedOut, s.Errors, s.Released, s.Lost, s.Abandoned)
	fmt.Fprintf(w, "scenarios: cron_ticks=%d cron_runs=%d cron_double_runs=%d payments=%d double_charges=%d sessions=%d hangs=%d crashes=%d pauses=%d deadlocks=%d overlaps=%d\n",
		s.CronTicks, s.CronRuns, s.CronDoubleRuns, s.Payments, s.DoubleCharges, s.Sessions, s.Hangs, s.Crashes, s.Pauses, s.Deadlocks, s.Overlaps)
	fmt.Fprintf(w, "events: recorded=%d sent=%d dropped=%d\n", es.Recorded, es.Sent, es.Dropped)
}

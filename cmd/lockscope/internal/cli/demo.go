package cli

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/lock"
)

// demoStuckAfter is the demo's stuck threshold: low, so the simulated hung
// export worker shows as stuck within half a minute.
const demoStuckAfter = 20 * time.Second

// demoStuckRules give the workflow editors' locks a threshold of their own:
// a person's editing session lasts minutes by design and is not stuck
// beside the hung export.
var demoStuckRules = []state.StuckRule{{Pattern: "workflow:*", After: 30 * time.Minute}}

func demoCommand() *command {
	return &command{
		name:  "demo",
		short: "zero-setup tour: embedded Redis, simulated lock users, collector and dashboard",
		long: `Demo starts everything in one process: an embedded Redis (unless --redis is
given), the simulated lock users of 'lockscope load', the collector and the
dashboard with /metrics. It prints the dashboard URL; live data shows within
seconds. The simulated export worker hangs while holding its lock, shows as
stuck after --stuck-after and stays so, with other export pods queued behind
it, until you force-release it from the dashboard with the operator login the
demo prints. The workflow editors' sessions have a threshold of their own
(workflow:*=30m), as a person's editing session would in production;
CLASS_GLOB=DURATION entries given with --stuck-after replace that one.

The embedded Redis is in memory and gone when the demo stops; it has no
keyspace notifications, so expirations are detected by the collector alone.`,
		define: func(f *flagSet) func(context.Context, *Env, []string) error {
			var rc redisConfig
			var sc stackConfig
			var ld loadConfig
			lg := logConfig{level: slog.LevelWarn}
			rc.defineConnDefault(f, "", "use this Redis instead of the embedded one (its keys get the simulator's locks)")
			rc.defineStream(f, "Redis stream the events travel on")
			sc.http.define(f)
			sc.dashboard.define(f)
			sc.collector.define(f, demoStuckAfter, demoStuckRules...)
			ld.define(f, 30, 6)
			lg.define(f)
			return func(ctx context.Context, env *Env, _ []string) error {
				if err := ld.validate(); err != nil {
					return err
				}
				if err := sc.validate(); err != nil {
					return err
				}
				if err := rc.checkPartitions(); err != nil {
					return err
				}
				if rc.url == "" && rc.tls.set() {
					return &Error{Code: ExitUsage, Err: errors.New("--redis-ca-cert, --redis-client-cert and --redis-client-key are for a Redis given with --redis (LOCKSCOPE_REDIS_URL): the embedded one has no TLS")}
				}
				log, err := lg.logger(env)
				if err != nil {
					return err
				}
				ln, err := listen(sc.http.listen)
				if err != nil {
					return err
				}
				defer ln.Close()

				var rdb redis.UniversalClient
				where := "Redis " + redactURL(rc.url)
				if rc.url == "" {
					m, err := startEmbedded()
					if err != nil {
						return err
					}
					defer m.Close()
					rdb = redis.NewClient(&redis.Options{Addr: m.Addr()})
					where = "embedded Redis redis://" + m.Addr()
				} else if rdb, err = rc.connect(ctx); err != nil {
					return err
				}
				defer rdb.Close()

				login := ""
				if sc.http.user == "" && sc.http.token == "" {
					// Forced release is half the tour: make it possible on
					// the loopback demo without setup.
					sc.http.user, sc.http.password = "demo", rand.Text()[:16]
					login = sc.http.user + " / " + sc.http.password
				}
				sc.stream, sc.partitions = rc.stream, rc.partitions
				st, err := newStack(log, rdb, sc)
				if err != nil {
					return err
				}
				em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: rc.stream, Partitions: rc.partitions, Owner: "lockscope-demo", Logger: log})
				ld.hangUntilReleased = true
				sim, err := ld.simulator(rdb, em, log)
				if err != nil {
					closeEmitter(em, sc.http.grace)
					return err
				}

				url := displayURL(ln.Addr())
				fmt.Fprintf(env.Stdout, "lockscope demo: dashboard %s (JSON %sapi/v1/overview, metrics %smetrics)\n", url, url, url)
				fmt.Fprintf(env.Stdout, "  %s (try: lockscope locks --redis %s)\n", where, redactURL(redisURLOf(rdb, rc.url)))
				if login != "" {
					fmt.Fprintf(env.Stdout, "  operator login for forced releases: %s\n", login)
				}
				fmt.Fprintf(env.Stdout, "  simulating: cron replicas, payments, workflow editors, a hot inventory key, a stuck holder (until you release it) with a queue behind it, a crashing and a paused holder, and a deadlock\n")
				fmt.Fprintf(env.Stdout, "  press Ctrl-C to stop\n")

				if ld.duration > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, ld.duration)
					defer cancel()
				}
				g, gctx := errgroup.WithContext(ctx)
				g.Go(func() error { return st.run(gctx, ln, sc.http.grace) })
				g.Go(func() error {
					err := sim.Run(gctx)
					closeEmitter(em, sc.http.grace)
					return err
				})
				return g.Wait()
			}
		},
	}
}

// startEmbedded starts an in-memory Redis whose TTLs follow the wall clock:
// miniredis only moves TTLs on FastForward otherwise, and locks must expire
// for the crash and pause scenarios to mean anything.
func startEmbedded() (*miniredis.Miniredis, error) {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("start embedded Redis: %w", err)
	}
	return m, nil
}

func redisURLOf(rdb redis.UniversalClient, url string) string {
	if url != "" {
		return url
	}
	if c, ok := rdb.(*redis.Client); ok {
		return "redis://" + c.Options().Addr
	}
	return url
}

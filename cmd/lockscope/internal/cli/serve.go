package cli

import (
	"context"

	"github.com/lockscope/lockscope/collector/state"
)

func serveCommand() *command {
	return &command{
		name:  "serve",
		short: "run the collector, the dashboard and /metrics against a Redis",
		long: `Serve reads the lock events from the Redis stream through a consumer group,
keeps the state of every lock in memory, and serves the dashboard, the JSON API
(/api/v1/...), Prometheus metrics (/metrics), /healthz and /readyz.

Forced releases from the dashboard need operator credentials
(LOCKSCOPE_OPERATOR_USER and LOCKSCOPE_OPERATOR_PASSWORD, or
LOCKSCOPE_OPERATOR_TOKEN); without them the dashboard is read-only.
On SIGINT or SIGTERM it stops taking requests, drains those in flight,
flushes its forced-release events and acknowledges what it has applied.`,
		define: func(f *flagSet) func(context.Context, *Env, []string) error {
			var rc redisConfig
			var sc stackConfig
			var lc logConfig
			rc.defineConn(f)
			rc.defineStream(f, "Redis stream the lock library writes its events to")
			sc.http.define(f)
			sc.dashboard.define(f)
			sc.collector.define(f, state.DefaultStuckAfter)
			lc.define(f)
			return func(ctx context.Context, env *Env, _ []string) error {
				if err := sc.validate(); err != nil {
					return err
				}
				if err := rc.checkPartitions(); err != nil {
					return err
				}
				log, err := lc.logger(env)
				if err != nil {
					return err
				}
				ln, err := listen(sc.http.listen)
				if err != nil {
					return err
				}
				defer ln.Close()
				rdb, err := rc.connect(ctx)
				if err != nil {
					return err
				}
				defer rdb.Close()
				sc.stream, sc.partitions = rc.stream, rc.partitions
				st, err := newStack(log, rdb, sc)
				if err != nil {
					return err
				}
				log.Info("lockscope serving", "url", displayURL(ln.Addr()), "redis", redactURL(rc.url), "stream", rc.stream,
					"read_only", sc.http.user == "" && sc.http.token == "")
				err = st.run(ctx, ln, sc.http.grace)
				log.Info("lockscope stopped")
				return err
			}
		},
	}
}

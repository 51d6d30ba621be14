package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/lockscope/lockscope/collector"
	"github.com/lockscope/lockscope/collector/promexport"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/dashboard"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/redisson"
	"github.com/lockscope/lockscope/lock"
)

// collectorConfig is the collector flags shared by serve and demo.
type collectorConfig struct {
	replica    string
	group      string
	consumer   string
	watch      []string
	watchNoTTL bool
	classes    []string
	maxClasses int
	maxKeys    int
	memLimitMB int
	stuckAfter stuckAfter
	backfill   time.Duration
	// lockOrderWindow: how long a lock-order edge is kept after it was last seen
	lockOrderWindow time.Duration
}

func (c *collectorConfig) define(f *flagSet, stuckAfter time.Duration, stuckRules ...state.StuckRule) {
	f.StuckAfter(&c.stuckAfter, "stuck-after", "LOCKSCOPE_STUCK_AFTER", stuckAfter, stuckRules,
		"a lock held longer than this counts as stuck; CLASS_GLOB=DURATION entries (repeat the flag, or separate with commas) set the threshold of the lock classes whose name matches, the first matching entry winning, e.g. --stuck-after 5m --stuck-after 'edit:*=2h'")
	f.List(&c.watch, "watch", "LOCKSCOPE_WATCH", nil, "key patterns (Redis globs) of other libraries' locks to watch through keyspace notifications, e.g. lock:*: a key is a lock when it holds a known library's token (redis-py, node-redlock, redsync, redislock); PATTERN=ttl also takes any value with a TTL for one, PATTERN=any any value; PATTERN=semaphore says its keys are Redisson semaphores (counters, shown live on their key page), no locks")
	f.Bool(&c.watchNoTTL, "watch-no-ttl", "LOCKSCOPE_WATCH_NO_TTL", false, "deprecated: the same as =any on every --watch pattern without a kind (a known library's token is a lock without a TTL anyway)")
	f.List(&c.classes, "class", "LOCKSCOPE_CLASSES", nil, "lock class rules PATTERN[=CLASS] (Redis globs, as --watch), tried in order before the default (numbers, UUIDs and hex ids become *)")
	f.Int(&c.maxClasses, "max-classes", "LOCKSCOPE_MAX_CLASSES", state.DefaultMaxClasses, "most distinct lock classes in metrics; the rest count as \"other\"")
	f.Int(&c.maxKeys, "max-keys", "LOCKSCOPE_MAX_KEYS", state.DefaultMaxKeys, "most keys the collector keeps state for")
	f.Int(&c.memLimitMB, "memory-limit-mb", "LOCKSCOPE_MEMORY_LIMIT_MB", 0, "soft memory limit of the Go runtime in MiB (0: 64 + 1 per 1024 --max-keys, 259 by default; negative: none; GOMEMLIMIT wins)")
	f.String(&c.replica, "replica", "LOCKSCOPE_REPLICA", "", "this replica's name, unique among the replicas and stable across its restarts: it reads every event through its own consumer group and rebuilds its picture at start (default <hostname>-<listen port>)")
	f.String(&c.group, "group", "LOCKSCOPE_GROUP", "", "share this consumer group with other collectors instead of the replica's own: the stream is SPLIT between them and each shows part of every lock's events (not for replicas)")
	f.String(&c.consumer, "consumer", "LOCKSCOPE_CONSUMER", "", "consumer name within a shared --group (default <hostname>-<pid>)")
	f.Duration(&c.backfill, "backfill", "LOCKSCOPE_BACKFILL", collector.DefaultBackfill, "how much of the stream's past a replica replays at start (negative: only new events)")
	f.Duration(&c.lockOrderWindow, "lock-order-window", "LOCKSCOPE_LOCK_ORDER_WINDOW", state.DefaultLockOrderWindow, "how long a lock order (class B taken while holding class A) is remembered after it was last seen: an inversion (both orders) is reported until one of them has not been seen for this long")
}

func (c *collectorConfig) aggregatorConfig() (state.Config, error) {
	cfg := state.Config{MaxClasses: c.maxClasses, MaxKeys: c.maxKeys,
		StuckAfter: c.stuckAfter.def, StuckRules: c.stuckAfter.rules}
	for _, r := range c.classes {
		pattern, class, _ := strings.Cut(r, "=")
		if pattern == "" {
			return cfg, &Error{Code: ExitUsage, Err: fmt.Errorf("invalid class rule %q: want PATTERN[=CLASS] (LOCKSCOPE_CLASSES)", r)}
		}
		cfg.Classes = append(cfg.Classes, state.ClassRule{Pattern: pattern, Class: class})
	}
	for _, w := range c.watch {
		if _, _, err := collector.ParseWatch(w); err != nil {
			return cfg, &Error{Code: ExitUsage, Err: fmt.Errorf("--watch (LOCKSCOPE_WATCH): %w", err)}
		}
	}
	if c.maxClasses < 0 || c.maxKeys < 0 {
		return cfg, &Error{Code: ExitUsage, Err: errors.New("--max-classes and --max-keys must not be negative")}
	}
	if c.lockOrderWindow <= 0 {
		return cfg, &Error{Code: ExitUsage, Err: errors.New("--lock-order-window must be positive (LOCKSCOPE_LOCK_ORDER_WINDOW)")}
	}
	cfg.LockOrderWindow = c.lockOrderWindow
	return cfg, nil
}

// dashboardConfig is the dashboard flags beyond the listener.
type dashboardConfig struct {
	requireAuthForRead bool
	trustedOrigins     []string
	allowedHosts       []string
	traceURL           string
}

func (c *dashboardConfig) define(f *flagSet) {
	f.Bool(&c.requireAuthForRead, "require-auth-for-read", "LOCKSCOPE_REQUIRE_AUTH_FOR_READ", false, "pages and the GET API need operator credentials too (default: reading is open)")
	f.List(&c.allowedHosts, "allowed-host", "LOCKSCOPE_ALLOWED_HOSTS", nil, "host names the dashboard answers to (name, *.domain, or * for any); others get 421, against DNS rebinding; IP addresses always pass (default: localhost, the listen host if a name, this machine's name when listening on every interface)")
	f.List(&c.trustedOrigins, "trusted-origin", "LOCKSCOPE_TRUSTED_ORIGINS", nil, "origins (https://locks.example.com) allowed to POST besides the request's own host, for reverse proxies")
	f.String(&c.traceURL, "trace-url", "LOCKSCOPE_TRACE_URL", "", "link the trace ids on the key page and /blocking into your tracing backend: an http(s) URL with {trace_id} where the id goes (https://tempo.example.com/trace/{trace_id}); default: ids shown as text")
}

// validate checks the operator settings before anything connects.
func (c *stackConfig) validate() error {
	h := c.http
	switch {
	case h.password != "" && h.user == "":
		return &Error{Code: ExitUsage, Err: errors.New("LOCKSCOPE_OPERATOR_PASSWORD needs LOCKSCOPE_OPERATOR_USER (--operator-user)")}
	case h.user != "" && h.password == "" && h.token == "":
		return &Error{Code: ExitUsage, Err: errors.New("LOCKSCOPE_OPERATOR_USER needs LOCKSCOPE_OPERATOR_PASSWORD or LOCKSCOPE_OPERATOR_TOKEN")}
	case c.dashboard.requireAuthForRead && h.user == "" && h.token == "" && h.tokensFile == "":
		return &Error{Code: ExitUsage, Err: errors.New("--require-auth-for-read needs operator credentials (LOCKSCOPE_OPERATOR_USER and _PASSWORD, or _TOKEN)")}
	case h.token != "" && tokenWeakness(h.token) != "":
		return &Error{Code: ExitUsage, Err: errors.New("LOCKSCOPE_OPERATOR_TOKEN (--operator-token) " + tokenWeakness(h.token) + ": it lets its bearer force-release locks; use a random one ('openssl rand -hex 16')")}
	case h.password != "" && passwordWeakness(h.password) != "":
		return &Error{Code: ExitUsage, Err: errors.New("LOCKSCOPE_OPERATOR_PASSWORD (--operator-password) " + passwordWeakness(h.password) + ": it lets its holder force-release locks; choose a longer one")}
	case h.readTimeout <= 0:
		return &Error{Code: ExitUsage, Err: errors.New("--read-timeout must be positive (LOCKSCOPE_READ_TIMEOUT)")}
	}
	if u := c.dashboard.traceURL; u != "" {
		if err := dashboard.CheckTraceURL(u); err != nil {
			return &Error{Code: ExitUsage, Err: fmt.Errorf("--trace-url (LOCKSCOPE_TRACE_URL): %w", err)}
		}
	}
	_, err := c.collector.aggregatorConfig()
	return err
}

// stack is the collector, its metrics and the dashboard on one Redis: what
// serve runs, and what demo runs next to the simulator.
type stack struct {
	log  *slog.Logger
	rdb  redis.UniversalClient
	agg  *state.Aggregator
	cols []*collector.Follower // one per partition stream
	// incidents writes the incident history the state derives
	incidents *collector.IncidentStore
	// lockOrder writes the lock-order graph the state derives, and reads it at start
	lockOrder *collector.LockOrderStore
	emitter   *lock.Emitter // records the dashboard's forced releases
	handler   http.Handler
	readTO    time.Duration // --read-timeout
}

type stackConfig struct {
	stream     string
	partitions int
	collector  collectorConfig
	http       httpConfig
	dashboard  dashboardConfig
}

// memoryLimit is the soft memory limit in bytes for c (0: none). The
// collector's state is bounded by --max-keys; without a limit the Go heap
// may grow to twice the live state before a collection.
func (c *collectorConfig) memoryLimit() int64 {
	switch {
	case c.memLimitMB < 0:
		return 0
	case c.memLimitMB > 0:
		return int64(c.memLimitMB) << 20
	}
	return 64<<20 + int64(c.maxKeys)<<10
}

func newStack(log *slog.Logger, rdb redis.UniversalClient, cfg stackConfig) (*stack, error) {
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		if l := cfg.collector.memoryLimit(); l > 0 {
			debug.SetMemoryLimit(l)
			// Said once: the Helm chart sizes the pod from the same rule.
			log.Info("soft memory limit set", "memory_limit_mib", l>>20, "max_keys", cfg.collector.maxKeys)
		}
	}
	acfg, err := cfg.collector.aggregatorConfig()
	if err != nil {
		return nil, err
	}
	metrics := promexport.New()
	acfg.Metrics = metrics
	// Every replica writes the incidents it derives into one shared history.
	incidents := collector.NewIncidentStore(rdb, cfg.stream, &collector.IncidentOptions{Logger: log, Malformed: metrics.IncidentsMalformed()})
	acfg.Incidents = incidents
	// ... and the lock-order graph into one shared hash, read back at start.
	lockOrder := collector.NewLockOrderStore(rdb, cfg.stream, &collector.LockOrderOptions{Window: acfg.LockOrderWindow, Logger: log})
	acfg.LockOrder = lockOrder
	agg := state.New(acfg)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := metrics.Register(reg, agg); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	authFailures := prometheus.NewCounter(prometheus.CounterOpts{Name: "lockscope_auth_failures_total",
		Help: "Requests to the dashboard or API with wrong operator credentials."})
	reg.MustRegister(authFailures)
	replica := cfg.collector.replica
	if replica == "" && cfg.collector.group == "" {
		replica = defaultReplica(cfg.http.listen)
	}
	// One collector per partition stream, into the same aggregator: a
	// partition's events stay in order, partitions are independent. The
	// first one also follows keyspace notifications.
	parts := max(cfg.partitions, 1)
	streams := event.Streams(cfg.stream, parts)
	cols := make([]*collector.Follower, len(streams))
	for i, st := range streams {
		opt := &collector.Options{
			Stream:     st,
			Partition:  i,
			Partitions: parts,
			Replica:    replica,
			Group:      cfg.collector.group,
			Consumer:   cfg.collector.consumer,
			Backfill:   cfg.collector.backfill,
			Logger:     log,
		}
		if i == 0 {
			opt.Watch, opt.WatchNoTTL = cfg.collector.watch, cfg.collector.watchNoTTL
		}
		cols[i] = collector.New(rdb, agg, opt)
	}
	user, tokenOperator := cfg.http.user, ""
	if cfg.http.password == "" && cfg.http.token != "" {
		// A user name with only a token names who holds the token.
		user, tokenOperator = "", cfg.http.user
	}
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: cfg.stream, Partitions: cfg.partitions, Owner: "lockscope-dashboard", Logger: log})
	// String locks are lock.Client's; Redisson's hash locks are read and
	// released by internal/redisson, their forced releases recorded alike.
	rel := redisson.NewAnyLockClient(lock.New(rdb, &lock.Options{Owner: "lockscope-dashboard", Recorder: em}), rdb, em)
	var tokens map[string]string
	if cfg.http.tokensFile != "" {
		if tokens, err = readTokens(cfg.http.tokensFile); err != nil {
			closeEmitter(em, time.Second)
			return nil, &Error{Code: ExitUsage, Err: err}
		}
	}
	allowedHosts := cfg.dashboard.allowedHosts
	if len(allowedHosts) == 0 {
		allowedHosts = dashboard.DefaultAllowedHosts(cfg.http.listen)
	}
	// OpenMetrics when the scraper asks for it (Prometheus does): the only
	// text format that carries the wait and hold histograms' exemplars.
	exposition := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)})
	h, err := dashboard.New(agg, rel, &dashboard.Options{
		Username:           user,
		Password:           cfg.http.password,
		Token:              cfg.http.token,
		TokenOperator:      tokenOperator,
		Tokens:             tokens,
		RequireAuthForRead: cfg.dashboard.requireAuthForRead,
		TrustedOrigins:     cfg.dashboard.trustedOrigins,
		TraceURL:           cfg.dashboard.traceURL,
		AllowedHosts:       allowedHosts,
		AuthFailures:       authFailures.Inc,
		Incidents:          incidents,
		Semaphore:          semaphoreReader(rdb, cfg.collector.watch),
		Ping:               func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		Metrics:            exposition,
		Logger:             log,
	})
	if err != nil {
		closeEmitter(em, time.Second)
		return nil, &Error{Code: ExitUsage, Err: err}
	}
	return &stack{log: log, rdb: rdb, agg: agg, cols: cols, incidents: incidents, lockOrder: lockOrder, emitter: em, handler: h, readTO: cfg.http.readTimeout}, nil
}

// defaultReplica names a replica by its host and listen port: unique among
// replicas on one host, stable across restarts.
func defaultReplica(listen string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "lockscope"
	}
	if _, port, err := net.SplitHostPort(listen); err == nil && port != "" && port != "0" {
		return host + "-" + port
	}
	return host
}

// run serves until ctx ends. On the way out the HTTP server drains first, so
// a forced release in flight completes and its event is flushed; the
// collector acknowledges what it applied.
func (s *stack) run(ctx context.Context, ln net.Listener, grace time.Duration) error {
	// The stored lock order first: the replay then counts only what the
	// store has not (state.RestoreLockOrder).
	s.lockOrder.Restore(ctx, s.agg)
	g, gctx := errgroup.WithContext(ctx)
	for _, col := range s.cols {
		g.Go(func() error {
			err := col.Run(gctx)
			if err != nil && gctx.Err() == nil {
				return fmt.Errorf("collector: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error { return s.incidents.Run(gctx) })
	g.Go(func() error { return s.lockOrder.Run(gctx) })
	g.Go(func() error {
		err := serveHTTP(gctx, s.log, ln, s.handler, s.readTO, grace)
		if ferr := closeEmitter(s.emitter, grace); ferr != nil {
			s.log.Warn("flushing forced-release events", "err", ferr)
		}
		return err
	})
	return g.Wait()
}

// closeEmitter flushes em and stops it, waiting at most grace: what serve,
// demo, load and the operator commands do with their emitters at the end.
func closeEmitter(em *lock.Emitter, grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return em.Close(ctx)
}

// semaphoreReader reads the keys of the "PATTERN=semaphore" watch rules as
// Redisson semaphores, for the dashboard; nil when there are none.
func semaphoreReader(rdb redis.UniversalClient, watch []string) dashboard.SemaphoreReader {
	match := collector.SemaphoreMatcher(watch)
	if match == nil {
		return nil
	}
	return func(ctx context.Context, key string) (*redisson.Semaphore, error) {
		if !match(key) {
			return nil, nil
		}
		s, err := redisson.ReadSemaphore(ctx, rdb, key, time.Now())
		if err != nil {
			return nil, err
		}
		return &s, nil
	}
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
)

// DefaultRedisURL is where serve, load and the operator commands look for
// Redis unless told otherwise.
const DefaultRedisURL = "redis://127.0.0.1:6379/0"

// DefaultListen is the dashboard and /metrics address: loopback only, so a
// fresh install exposes nothing to the network.
const DefaultListen = "127.0.0.1:8080"

// logConfig is the logging flags every long-running command shares.
type logConfig struct {
	level  slog.Level
	format string
}

func (c *logConfig) define(f *flagSet) {
	f.fs.Var((*levelValue)(&c.level), "log-level", "log level: debug, info, warn or error")
	f.add("log-level", "LOCKSCOPE_LOG_LEVEL", "level")
	f.String(&c.format, "log-format", "LOCKSCOPE_LOG_FORMAT", "text", "log format: text or json")
}

// logger builds the structured logger; logs go to stderr so stdout stays
// for what the user asked for (URLs, tables, JSON).
func (c *logConfig) logger(env *Env) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: c.level}
	var log *slog.Logger
	switch c.format {
	case "text":
		log = slog.New(slog.NewTextHandler(env.Stderr, opts))
	case "json":
		log = slog.New(slog.NewJSONHandler(env.Stderr, opts))
	default:
		return nil, &Error{Code: ExitUsage, Err: fmt.Errorf("invalid log format %q: want text or json (LOCKSCOPE_LOG_FORMAT)", c.format)}
	}
	quietRedis(log)
	return log, nil
}

type levelValue slog.Level

func (l *levelValue) String() string { return strings.ToLower((*slog.Level)(l).String()) }
func (l *levelValue) Set(s string) error {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("want debug, info, warn or error")
	}
	*l = levelValue(lv)
	return nil
}

// redisConfig is the Redis connection flags.
type redisConfig struct {
	url         string
	stream      string
	partitions  int
	dialTimeout time.Duration
	tls         redisTLS
}

// defineConn registers the connection flags with the usual default.
func (c *redisConfig) defineConn(f *flagSet) {
	c.defineConnDefault(f, DefaultRedisURL, "Redis URL (redis://[user:password@]host:port/db, rediss:// for TLS)")
}

func (c *redisConfig) defineConnDefault(f *flagSet, def, usage string) {
	f.String(&c.url, "redis", "LOCKSCOPE_REDIS_URL", def, usage)
	f.meta["redis"] = "URL"
	f.Duration(&c.dialTimeout, "redis-timeout", "LOCKSCOPE_REDIS_TIMEOUT", 5*time.Second, "how long to wait for Redis to answer at start-up")
	c.tls.define(f)
}

// defineStream registers the event stream flag.
func (c *redisConfig) defineStream(f *flagSet, usage string) {
	f.String(&c.stream, "stream", "LOCKSCOPE_STREAM", defaultStream, usage)
	f.Int(&c.partitions, "partitions", "LOCKSCOPE_PARTITIONS", 1, "spread the events by lock key over this many stream keys (hash-tagged so that a Cluster spreads them over its masters); emitters and collectors must agree")
}

// checkPartitions validates --partitions.
func (c *redisConfig) checkPartitions() error {
	if c.partitions < 1 || c.partitions > event.MaxPartitions {
		return &Error{Code: ExitUsage, Err: fmt.Errorf("--partitions must be between 1 and %d (LOCKSCOPE_PARTITIONS)", event.MaxPartitions)}
	}
	return nil
}

const defaultStream = event.DefaultStream

// connect opens a client and checks that Redis answers, so an unreachable
// Redis is one clear line at start-up instead of errors later. The URL forms
// are go-redis's:
//
//   - redis://host:port/db: a single node. If that node is a Cluster node,
//     the Cluster is used (the node is the seed).
//   - redis://host1:port?addr=host2:port&addr=host3:port: a Cluster, with
//     several seed addresses.
//   - redis://sentinel1:port?master_name=NAME&addr=sentinel2:port: the
//     master NAME found through Sentinel, followed across failovers.
//
// rediss:// is TLS in every form; the TLS flags add a private CA and a
// client certificate to it.
func (c *redisConfig) connect(ctx context.Context) (redis.UniversalClient, error) {
	timeout := c.dialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	bad := func(err error) error {
		return &Error{Code: ExitUsage, Err: fmt.Errorf("invalid Redis URL %s: %s (LOCKSCOPE_REDIS_URL)", redactURL(c.url), redactIn(urlError(err), c.url))}
	}
	u, err := url.Parse(c.url)
	if err != nil {
		return nil, bad(err)
	}
	files, err := c.tls.load()
	if err != nil {
		return nil, err
	}
	if files != nil && u.Scheme != "rediss" {
		return nil, &Error{Code: ExitUsage, Err: fmt.Errorf("--redis-ca-cert, --redis-client-cert and --redis-client-key need a rediss:// URL, not %s (LOCKSCOPE_REDIS_URL)", redactURL(c.url))}
	}
	unreachable := func(what string, err error) error {
		msg := fmt.Sprintf("cannot reach %s at %s: %s", what, redactURL(c.url), redactIn(err.Error(), c.url))
		if hint := tlsHint(err); hint != "" {
			msg += " (" + hint + ")"
		} else if u.Scheme == "redis" && plainToTLS(err) {
			msg += " (if Redis speaks TLS, use a rediss:// URL)"
		} else if u.Scheme == "rediss" && plainToTLS(err) {
			// TLS 1.3 ends the handshake before the server checks the
			// client's certificate: a refusal may reach us as a reset.
			msg += " (Redis closed the connection after the TLS handshake: it may require a client certificate signed by its CA and valid now, --redis-client-cert and --redis-client-key)"
		} else if u.Scheme == "rediss" && errors.Is(err, context.DeadlineExceeded) {
			msg += " (no TLS handshake within --redis-timeout: if Redis does not speak TLS on this port, use a redis:// URL)"
		}
		return errors.New(msg)
	}
	q := u.Query()
	var rdb redis.UniversalClient
	switch {
	case q.Has("master_name"):
		opt, err := redis.ParseFailoverURL(c.url)
		if err != nil {
			return nil, bad(err)
		}
		opt.DialTimeout = timeout
		opt.TLSConfig = files.apply(opt.TLSConfig)
		rdb = redis.NewFailoverClient(opt)
	case q.Has("addr"):
		opt, err := redis.ParseClusterURL(c.url)
		if err != nil {
			return nil, bad(err)
		}
		opt.DialTimeout = timeout
		opt.TLSConfig = files.apply(opt.TLSConfig)
		rdb = redis.NewClusterClient(opt)
	default:
		opt, err := redis.ParseURL(c.url)
		if err != nil {
			return nil, bad(err)
		}
		opt.DialTimeout = timeout
		opt.TLSConfig = files.apply(opt.TLSConfig)
		rdb = redis.NewClient(opt)
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, unreachable("Redis", err)
	}
	if single, ok := rdb.(*redis.Client); ok && clusterEnabled(pctx, single) {
		// One node of a Cluster: use the Cluster, this node as the seed.
		opt, err := redis.ParseClusterURL((&url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host, RawQuery: u.RawQuery}).String())
		if err != nil {
			rdb.Close()
			return nil, bad(err)
		}
		opt.DialTimeout = timeout
		opt.TLSConfig = files.apply(opt.TLSConfig)
		rdb.Close()
		rdb = redis.NewClusterClient(opt)
		if err := rdb.Ping(pctx).Err(); err != nil {
			rdb.Close()
			return nil, unreachable("the Redis Cluster", err)
		}
	}
	return rdb, nil
}

// plainToTLS reports whether err is what a plain-text client gets from a
// server that expects TLS: the server drops the connection.
func plainToTLS(err error) bool {
	msg := err.Error()
	return errors.Is(err, io.EOF) || strings.Contains(msg, "connection reset by peer") || strings.HasSuffix(msg, "EOF")
}

// clusterEnabled reports whether the node runs in Cluster mode (INFO refused
// counts as no).
func clusterEnabled(ctx context.Context, rdb *redis.Client) bool {
	info, err := rdb.Info(ctx, "cluster").Result()
	return err == nil && strings.Contains(info, "cluster_enabled:1")
}

// redisLogger routes go-redis's internal log lines (dial retries, pool
// messages) into slog at debug level: the user gets one clear error line
// from the command, not the library's retries.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis: "+strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// quietRedis installs redisLogger. go-redis has one process-wide logger;
// the binary owns the process, so the command line sets it.
func quietRedis(log *slog.Logger) { redis.SetLogger(redisLogger{log}) }

// redactURL hides the user information (user name and password) of a Redis
// URL before it is shown or logged, even in a URL that does not parse.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		if u.User == nil {
			return s
		}
		return u.Redacted()
	}
	if info := userinfo(s); info != "" {
		return strings.Replace(s, info+"@", "xxxxx@", 1)
	}
	return s
}

// userinfo is the text between "://" and the last "@" of the authority (up
// to the first '/', '?' or '#' after the '@'), or "". For a URL that does
// not parse, the last '@' is taken: a password may hold '@', '/' or '?',
// unescaped, while a host cannot hold '@'.
func userinfo(s string) string {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return ""
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	return rest[:at]
}

// redactIn replaces, in msg, any text of the URL's user information (as
// written, and unescaped) with "xxxxx": error messages of URL parsers quote
// the URL or the part they choked on.
func redactIn(msg, rawURL string) string {
	info := userinfo(rawURL)
	if info == "" {
		return msg
	}
	secrets := []string{info}
	if _, pw, ok := strings.Cut(info, ":"); ok && pw != "" {
		secrets = append(secrets, pw)
		if un, err := url.PathUnescape(pw); err == nil && un != pw {
			secrets = append(secrets, un)
		}
	}
	for _, sec := range secrets {
		msg = strings.ReplaceAll(msg, sec, "xxxxx")
	}
	return msg
}

// urlError is err's text without the URL that net/url quotes in it.
func urlError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// httpConfig is the dashboard server flags.
type httpConfig struct {
	listen      string
	grace       time.Duration
	readTimeout time.Duration
	user        string
	password    string
	token       string
	tokensFile  string
}

func (c *httpConfig) define(f *flagSet) {
	f.String(&c.listen, "listen", "LOCKSCOPE_LISTEN", DefaultListen, "address of the dashboard, the JSON API and /metrics")
	f.meta["listen"] = "host:port"
	f.Duration(&c.readTimeout, "read-timeout", "LOCKSCOPE_READ_TIMEOUT", 10*time.Second, "how long a client may take to send a request's headers, and again its body (a slow POST is cut off)")
	f.Duration(&c.grace, "shutdown-timeout", "LOCKSCOPE_SHUTDOWN_TIMEOUT", 10*time.Second, "how long shutdown waits for requests in flight and for the event flush")
	f.String(&c.user, "operator-user", "LOCKSCOPE_OPERATOR_USER", "", "operator user name for forced releases (HTTP basic auth)")
	f.Secret(&c.password, "operator-password", "LOCKSCOPE_OPERATOR_PASSWORD", "operator password (prefer the environment variable: flags show in ps)")
	f.Secret(&c.token, "operator-token", "LOCKSCOPE_OPERATOR_TOKEN", "operator bearer token for the JSON API (prefer the environment variable)")
	f.String(&c.tokensFile, "operator-tokens-file", "LOCKSCOPE_OPERATOR_TOKENS_FILE", "", "file of named operator bearer tokens, one 'NAME TOKEN' per line ('#' comments): a release is recorded as by NAME")
}

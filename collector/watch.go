package collector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockscope/lockscope/event/class"
	"github.com/lockscope/lockscope/internal/ctxsleep"
	"github.com/redis/go-redis/v9"
)

// Keyspace notifications, in three parts:
//
//   - watch.go (here): every replica follows the "expired" keyevent channel,
//     which confirms at once that a held lock of the library expired
//     (without it the Aggregator's Tick finds out from the TTL alone), and
//     keeps notify-keyspace-events set as far as Redis lets it;
//   - watch_lease.go: of the replicas with Watch patterns, the one holding
//     the watcher lease follows other libraries' locks, which emit no
//     events, and writes what it sees to the stream as passive events that
//     every replica applies like any other (so all show one truth);
//   - watch_passive.go: what that replica does on each Redis node: read a
//     watched key after each notification, rescan the patterns after every
//     (re)subscription, and tell acquisitions, renewals, releases and
//     expirations apart.
//
// In a Redis Cluster every master present at start is followed (keyspace
// notifications are node-local); masters added later need a restart.

// Flags of notify-keyspace-events the collector needs.
const (
	notifyExpired = "Ex"   // keyevent channel: expired
	notifyWatch   = "K$gh" // keyspace channels: set ($), del and expire (g), hash writes (h: Redisson), expired (x, above)
	notifyAll     = "g$lshzxetd"
)

const (
	receiveEvery = 30 * time.Second // a silent subscription is pinged after this
	scanBatch    = 256
)

// watch follows keyspace notifications until ctx is done: the expiry
// confirmations on every node, and the passive watch while this replica
// holds the watcher lease.
func (c *Follower) watch(ctx context.Context) {
	var nodes []watchNode
	var bo backoff
	for {
		var err error
		if nodes, err = c.watchNodes(ctx); err == nil {
			break
		}
		if !ctxsleep.Sleep(ctx, bo.next()) {
			return
		}
	}
	// One node answering that it sends no notifications (miniredis, the
	// demo's embedded Redis) means none of them does.
	ok, err := probeNotifications(ctx, nodes[0].rdb)
	for err != nil {
		if !ctxsleep.Sleep(ctx, bo.next()) {
			return
		}
		ok, err = probeNotifications(ctx, nodes[0].rdb)
	}
	if !ok {
		c.log.Info("this server sends no keyspace notifications (embedded or emulated Redis): expirations are detected from TTLs alone and Watch patterns are not followed")
		return
	}
	for i := range nodes {
		// The flags of the passive watch too: any replica may take it over.
		cfg := &notifyConfig{c: c, rdb: nodes[i].rdb, need: notifyExpired}
		if len(c.rules) > 0 {
			cfg.need += notifyWatch
			cfg.what = "confirmed expirations and passive watch of " + c.watchList()
		}
		nodes[i].cfg = cfg
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { c.confirmExpiries(ctx, n) })
	}
	if len(c.rules) > 0 {
		wg.Go(func() { c.lead(ctx, nodes) })
	}
	wg.Wait()
}

type watchNode struct {
	rdb redis.UniversalClient
	db  int
	cfg *notifyConfig // shared by the node's subscriptions
}

func (n watchNode) expiredChan() string { return "__keyevent@" + strconv.Itoa(n.db) + "__:expired" }
func (n watchNode) spacePrefix() string { return "__keyspace@" + strconv.Itoa(n.db) + "__:" }

// watchNodes lists the nodes whose notifications must be followed: every
// master of a cluster (notifications are node-local), else the client itself.
func (c *Follower) watchNodes(ctx context.Context) ([]watchNode, error) {
	switch r := c.rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		var nodes []watchNode
		err := r.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			nodes = append(nodes, watchNode{rdb: m})
			mu.Unlock()
			return nil
		})
		if err == nil && len(nodes) == 0 {
			err = errors.New("collector: the cluster has no master")
		}
		return nodes, err
	case *redis.Client:
		return []watchNode{{rdb: r, db: r.Options().DB}}, nil
	default:
		return []watchNode{{rdb: c.rdb}}, nil
	}
}

// confirmExpiries follows one node's "expired" keyevent channel: an
// expiration of a key the library holds is confirmed at once. Other
// libraries' locks are left to the passive watch, whose expired events
// travel through the stream.
func (c *Follower) confirmExpiries(ctx context.Context, n watchNode) {
	c.follow(ctx, n.rdb, []string{n.expiredChan()}, func(ctx context.Context, first bool) {
		// A restarted Redis forgot what CONFIG SET changed.
		n.cfg.apply(ctx)
	}, func(_ context.Context, m *redis.Message) {
		if c.watched(m.Payload) && c.agg.Passive(m.Payload) {
			return
		}
		c.agg.KeyExpired(m.Payload)
	})
}

// watched reports whether key matches one of the Watch patterns.
func (c *Follower) watched(key string) bool {
	for _, r := range c.rules {
		if class.Match(r.pattern, key) {
			return true
		}
	}
	return false
}

// watchList lists the Watch patterns for the logs.
func (c *Follower) watchList() string {
	var ps []string
	for _, r := range c.rules {
		ps = append(ps, r.pattern)
	}
	return strings.Join(ps, ", ")
}

// follow subscribes rdb to the channel patterns and hands every message to
// handle until ctx is done, reconnecting after a failure. After every
// complete (re)subscription it calls subscribed, first true the first time:
// notifications were missed while the subscription was down.
func (c *Follower) follow(ctx context.Context, rdb redis.UniversalClient, channels []string,
	subscribed func(ctx context.Context, first bool), handle func(context.Context, *redis.Message)) {
	ps := rdb.PSubscribe(ctx, channels...)
	defer ps.Close()
	// Receive does not watch ctx: closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()

	confirmed := make(map[string]bool, len(channels))
	first := true
	lastLog := time.Time{}
	var bo backoff
	for {
		msg, err := ps.ReceiveTimeout(ctx, receiveEvery)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Quiet, or a dead link: a ping finds out, and a failed
				// ping makes the next receive reconnect.
				_ = ps.Ping(ctx)
				continue
			}
			clear(confirmed)
			if time.Since(lastLog) >= 30*time.Second {
				c.log.Warn("keyspace notifications: subscription lost; reconnecting (passive state is rescanned after)", "err", err)
				lastLog = time.Now()
			}
			if !ctxsleep.Sleep(ctx, bo.next()) {
				return
			}
			continue
		}
		bo.reset()
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind != "psubscribe" {
				continue
			}
			confirmed[m.Channel] = true
			if len(confirmed) == len(channels) {
				subscribed(ctx, first)
				first = false
			}
		case *redis.Message:
			handle(ctx, m)
		}
	}
}

// probeNotifications reports whether the server can send keyspace
// notifications at all. miniredis (the demo's embedded Redis) cannot, and
// answers INFO server with an error.
func probeNotifications(ctx context.Context, rdb redis.UniversalClient) (bool, error) {
	info, err := rdb.Info(ctx, "server").Result()
	var rerr redis.Error
	switch {
	case err == nil:
		return strings.Contains(info, "redis_version:"), nil
	case redis.HasErrorPrefix(err, "NOPERM"):
		return true, nil // a real Redis with a restricted user
	case errors.As(err, &rerr):
		return false, nil
	}
	return false, err
}

// notifyConfig merges the flags a subscription needs into one node's
// notify-keyspace-events.
type notifyConfig struct {
	mu           sync.Mutex
	c            *Follower
	rdb          redis.UniversalClient
	need         string
	what         string // what the flags are for, in the refusal's log line
	refusalShown bool
}

// apply merges the flags into notify-keyspace-events, keeping those already
// set. A server that refuses (ACL without +config, managed Redis) gets one
// clear log line saying what to configure.
func (n *notifyConfig) apply(ctx context.Context) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cur, err := n.rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		n.refused(err, "")
		return
	}
	flags, ok := cur["notify-keyspace-events"]
	if !ok {
		n.refused(errors.New("CONFIG GET notify-keyspace-events answered nothing"), "")
		return
	}
	missing := missingFlags(flags, n.need)
	if missing == "" {
		return
	}
	if err := n.rdb.ConfigSet(ctx, "notify-keyspace-events", flags+missing).Err(); err != nil {
		n.refused(err, flags)
		return
	}
	n.c.log.Info("enabled keyspace notifications", "notify-keyspace-events", flags+missing, "was", flags)
}

func (n *notifyConfig) refused(err error, cur string) {
	if n.refusalShown {
		return
	}
	n.refusalShown = true
	want := cur + missingFlags(cur, n.need)
	what := "confirmed expirations"
	if n.what != "" {
		what = n.what
	}
	n.c.log.Warn(fmt.Sprintf("keyspace notifications: cannot read or set notify-keyspace-events (%v). "+
		"For %s the server's notify-keyspace-events must include %q: unless it already does, set e.g. `notify-keyspace-events %s` in redis.conf "+
		"or your provider's parameter group. Without it expirations are detected from TTLs alone and watched keys are not followed.",
		err, what, n.need, want), "need", n.need, "current", cur)
}

// missingFlags returns the flags of need that cur does not enable.
func missingFlags(cur, need string) string {
	var out []byte
	all := strings.IndexByte(cur, 'A') >= 0
	for i := 0; i < len(need); i++ {
		f := need[i]
		if strings.IndexByte(cur, f) >= 0 || all && strings.IndexByte(notifyAll, f) >= 0 || slices.Contains(out, f) {
			continue
		}
		out = append(out, f)
	}
	return string(out)
}

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

	"github.com/lockscope/lockscope/collector/internal/glob"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
	"github.com/redis/go-redis/v9"
)

// Keyspace notifications. The "expired" keyevent channel confirms at once
// that a held lock's TTL lapsed (without it the Aggregator's Tick finds out
// from the TTL alone). Keyspace channels of the Watch patterns let the
// collector follow locks taken by other libraries, which emit no events:
//
//	set (SET NX PX, SETNX)   read value and PTTL: a new holder is an acquisition
//	expire (EXPIRE, PEXPIRE) the holder's TTL moved: a renewal (or the TTL of a SETNX)
//	del                      a release
//	expired, evicted         the TTL lapsed (or memory pressure took the key)
//
// Limits. Notifications are fire-and-forget: while the watcher is
// disconnected it misses them, so it rescans the patterns (SCAN) at start and
// after every reconnect and reconciles: new holders become acquisitions, keys
// gone before their TTL became releases, keys gone after it expirations. A
// hold shorter than one round trip (value deleted before the watcher reads
// it) is not seen. Values written by lockscope itself are skipped: those
// locks report through the event stream. In a Redis Cluster every master
// present at start is watched; masters added later need a restart.

// Flags of notify-keyspace-events the collector needs.
const (
	notifyExpired = "Ex"  // keyevent channel: expired
	notifyWatch   = "K$g" // keyspace channels: set ($), del and expire (g), expired (x, above)
	notifyAll     = "g$lshzxetd"
)

const (
	maxPassive   = 100_000              // watched holds tracked; a pattern matching more is too broad
	renewSlack   = 5 * time.Millisecond // PTTL is in whole milliseconds
	receiveEvery = 30 * time.Second     // a silent subscription is pinged after this
	scanBatch    = 256
)

// watch runs one watcher per Redis node until ctx is done.
func (c *Feeder) watch(ctx context.Context) {
	var nodes []watchNode
	var bo backoff
	for {
		var err error
		if nodes, err = c.watchNodes(ctx); err == nil {
			break
		}
		if !sleep(ctx, bo.next()) {
			return
		}
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		w := newNodeWatcher(c, n)
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
	}
	wg.Wait()
}

type watchNode struct {
	rdb redis.UniversalClient
	db  int
}

// watchNodes lists the nodes whose notifications must be followed: every
// master of a cluster (notifications are node-local), else the client itself.
func (c *Feeder) watchNodes(ctx context.Context) ([]watchNode, error) {
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
		return nodes, err
	case *redis.Client:
		return []watchNode{{rdb: r, db: r.Options().DB}}, nil
	default:
		return []watchNode{{rdb: c.rdb}}, nil
	}
}

type nodeWatcher struct {
	c   *Feeder
	rdb redis.UniversalClient

	expiredChan string         // __keyevent@<db>__:expired
	spacePrefix string         // __keyspace@<db>__:
	patterns    []string       // user patterns, deduplicated, in order
	chanIndex   map[string]int // keyspace channel pattern -> index in patterns

	held         map[string]*passiveHold
	keyspaceOff  bool // the server is known not to send keyspace events
	refusalShown bool
	fullShown    bool
	buf          [1]event.Event
}

// passiveHold is a watched key's holder as last seen.
type passiveHold struct {
	value    string
	since    time.Time
	deadline deadline
}

func newNodeWatcher(c *Feeder, n watchNode) *nodeWatcher {
	db := strconv.Itoa(n.db)
	w := &nodeWatcher{
		c:           c,
		rdb:         n.rdb,
		expiredChan: "__keyevent@" + db + "__:expired",
		spacePrefix: "__keyspace@" + db + "__:",
		chanIndex:   make(map[string]int),
		held:        make(map[string]*passiveHold),
	}
	for _, p := range c.opt.Watch {
		if _, dup := w.chanIndex[w.spacePrefix+p]; dup || p == "" {
			continue
		}
		w.chanIndex[w.spacePrefix+p] = len(w.patterns)
		w.patterns = append(w.patterns, p)
	}
	return w
}

func (w *nodeWatcher) run(ctx context.Context) {
	log := w.c.log
	var bo backoff
	for {
		ok, err := w.probe(ctx)
		if err == nil {
			if !ok {
				log.Info("this server sends no keyspace notifications (embedded or emulated Redis): expirations are detected from TTLs alone and Watch patterns are not followed")
				return
			}
			break
		}
		if !sleep(ctx, bo.next()) {
			return
		}
	}
	w.configure(ctx)

	channels := make([]string, 0, 1+len(w.patterns))
	channels = append(channels, w.expiredChan)
	for _, p := range w.patterns {
		channels = append(channels, w.spacePrefix+p)
	}
	ps := w.rdb.PSubscribe(ctx, channels...)
	defer ps.Close()
	// Receive does not watch ctx: closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()

	confirmed := make(map[string]bool, len(channels))
	first := true
	lastLog := time.Time{}
	bo.reset()
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
				log.Warn("keyspace notifications: subscription lost; reconnecting (passive state is rescanned after)", "err", err)
				lastLog = time.Now()
			}
			if !sleep(ctx, bo.next()) {
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
				// (Re)subscribed: a restarted Redis forgot what CONFIG SET
				// changed, and notifications were missed while away.
				if !first {
					w.configure(ctx)
				}
				first = false
				w.resync(ctx)
				w.c.synced.Add(1)
			}
		case *redis.Message:
			w.handle(ctx, m)
		}
	}
}

// probe reports whether the server can send keyspace notifications at all.
// miniredis (the demo's embedded Redis) cannot, and answers INFO server with
// an error.
func (w *nodeWatcher) probe(ctx context.Context) (bool, error) {
	info, err := w.rdb.Info(ctx, "server").Result()
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

// configure merges the flags the collector needs into notify-keyspace-events,
// keeping those already set. A server that refuses (ACL without +config,
// managed Redis) gets one clear log line saying what to configure.
func (w *nodeWatcher) configure(ctx context.Context) {
	need := notifyExpired
	if len(w.patterns) > 0 {
		need += notifyWatch
	}
	cur, err := w.rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		w.refused(err, "", need)
		return
	}
	flags, ok := cur["notify-keyspace-events"]
	if !ok {
		w.refused(errors.New("CONFIG GET notify-keyspace-events answered nothing"), "", need)
		return
	}
	missing := missingFlags(flags, need)
	if missing == "" {
		w.keyspaceOff = missingFlags(flags, "Kx") != ""
		return
	}
	if err := w.rdb.ConfigSet(ctx, "notify-keyspace-events", flags+missing).Err(); err != nil {
		w.keyspaceOff = missingFlags(flags, "Kx") != ""
		w.refused(err, flags, need)
		return
	}
	w.keyspaceOff = false
	w.c.log.Info("enabled keyspace notifications", "notify-keyspace-events", flags+missing, "was", flags)
}

func (w *nodeWatcher) refused(err error, cur, need string) {
	if w.refusalShown {
		return
	}
	w.refusalShown = true
	want := cur + missingFlags(cur, need)
	what := "confirmed expirations"
	if len(w.patterns) > 0 {
		what += " and passive watch of " + strings.Join(w.patterns, ", ")
	}
	w.c.log.Warn(fmt.Sprintf("keyspace notifications: cannot read or set notify-keyspace-events (%v). "+
		"For %s the server's notify-keyspace-events must include %q: unless it already does, set e.g. `notify-keyspace-events %s` in redis.conf "+
		"or your provider's parameter group. Without it expirations are detected from TTLs alone and watched keys are not followed.",
		err, what, need, want), "need", need, "current", cur)
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

func (w *nodeWatcher) handle(ctx context.Context, m *redis.Message) {
	if m.Pattern == w.expiredChan {
		key := m.Payload
		if !w.keyspaceOff && w.patternOf(key) >= 0 {
			return // its keyspace channel reports it
		}
		w.c.agg.KeyExpired(key)
		return
	}
	key, ok := strings.CutPrefix(m.Channel, w.spacePrefix)
	if !ok {
		return
	}
	// A key matching several patterns is announced once per pattern.
	if i, ok := w.chanIndex[m.Pattern]; !ok || i != w.patternOf(key) {
		return
	}
	switch m.Payload {
	case "set", "expire":
		w.observe(ctx, key)
	case "del":
		w.released(key)
	case "expired", "evicted":
		w.expired(key)
	}
}

// patternOf returns the index of the first pattern matching key, or -1.
func (w *nodeWatcher) patternOf(key string) int {
	for i, p := range w.patterns {
		if glob.Match(p, key) {
			return i
		}
	}
	return -1
}

// observe reads key's value and TTL after a set or expire.
func (w *nodeWatcher) observe(ctx context.Context, key string) {
	pipe := w.rdb.Pipeline()
	get := pipe.Get(ctx, key)
	pttl := pipe.PTTL(ctx, key)
	sent := time.Now()
	_, _ = pipe.Exec(ctx)
	value, err := get.Result()
	if err != nil {
		// redis.Nil: gone already, its del or expired follows. WRONGTYPE:
		// not a lock. Connection errors: the resync after reconnect
		// catches up.
		return
	}
	w.update(key, value, pttl.Val(), sent, false)
}

// update records key's current value and TTL (PTTL reply, read after sent)
// and emits what changed. A resync records silently what is only a TTL
// change.
func (w *nodeWatcher) update(key, value string, pttl time.Duration, sent time.Time, resync bool) {
	now := w.c.opt.Now()
	if own(value) || w.c.internalKey(key) || pttl < 0 && !w.c.opt.WatchNoTTL {
		// The library's own locks come through the stream; the collector's
		// keys and fence counters are no locks; a key without a TTL is
		// taken for a lock only when the user says so (WatchNoTTL).
		// Was it a lock (PERSIST, or SET without expiry)? Its hold ended.
		w.released(key)
		return
	}
	// Redis evaluated PTTL somewhere between sent and received: the
	// deadline lies in [sent+pttl, received+pttl] by the local clock.
	var ttl time.Duration
	var dl deadline
	if pttl > 0 {
		ttl = pttl
		dl = deadline{lo: sent.Add(pttl), hi: time.Now().Add(pttl)}
	}
	if h := w.held[key]; h != nil && h.value == value {
		moved := !h.deadline.same(dl)
		h.deadline = dl
		// SET NX PX raises "set" and "expire" together: the second one
		// finds the deadline where the first left it.
		if moved && !resync && ttl > 0 {
			w.emit(event.Event{Type: event.Renewed, Key: key, Owner: lock.ForeignOwner(value), TTL: ttl, TS: now.UnixNano(), Passive: true})
		}
		return
	}
	_, known := w.held[key]
	if !known && len(w.held) >= maxPassive {
		if !w.fullShown {
			w.fullShown = true
			w.c.log.Warn("passive watch: too many watched keys held at once; ignoring new ones (narrow the Watch patterns)", "max", maxPassive)
		}
		return
	}
	w.held[key] = &passiveHold{value: value, since: now, deadline: dl}
	if resync && !known {
		// Found held by a scan, not seen acquired: held at least since
		// now, or since when a checkpoint or the stream says it began
		// (a renewal of an unknown hold takes the key without counting an
		// acquisition; one of a known hold keeps its since).
		w.emit(event.Event{Type: event.Renewed, Key: key, Owner: lock.ForeignOwner(value), TTL: ttl, TS: now.UnixNano(), Passive: true})
		return
	}
	w.emit(event.Event{Type: event.Acquired, Key: key, Owner: lock.ForeignOwner(value), TTL: ttl, Attempts: 1, TS: now.UnixNano(), Passive: true})
}

// deadline is when a watched key expires, known within [lo, hi] by the local
// clock; zero when it has no TTL.
type deadline struct{ lo, hi time.Time }

// same reports whether two readings can be the same deadline.
func (d deadline) same(e deadline) bool {
	if d.lo.IsZero() || e.lo.IsZero() {
		return d.lo.IsZero() == e.lo.IsZero()
	}
	return !e.lo.After(d.hi.Add(renewSlack)) && !e.hi.Before(d.lo.Add(-renewSlack))
}

// passed reports whether the deadline has certainly passed at now.
func (d deadline) passed(now time.Time) bool { return !d.lo.IsZero() && now.After(d.hi) }

func (w *nodeWatcher) released(key string) {
	h := w.held[key]
	if h == nil {
		return
	}
	delete(w.held, key)
	now := w.c.opt.Now()
	w.emit(event.Event{Type: event.Released, Key: key, Owner: lock.ForeignOwner(h.value), Hold: max(now.Sub(h.since), 0), TS: now.UnixNano(), Passive: true})
}

// internalKey reports whether key is one of lockscope's own keys (the
// stream, its checkpoint and presence keys, the fence counters): never a
// lock, whatever a wide watch pattern matches.
func (c *Feeder) internalKey(key string) bool {
	return key == c.opt.Stream || strings.HasPrefix(key, c.opt.Stream+":") || strings.HasPrefix(key, lock.FencePrefix)
}

func (w *nodeWatcher) expired(key string) {
	delete(w.held, key)
	w.c.agg.KeyExpired(key)
}

func (w *nodeWatcher) emit(e event.Event) {
	w.buf[0] = e
	w.c.agg.Apply(w.buf[:])
	w.buf[0] = event.Event{}
}

// resync reconciles the watched holds with a SCAN of the patterns.
func (w *nodeWatcher) resync(ctx context.Context) {
	if len(w.patterns) == 0 {
		return
	}
	seen := make(map[string]bool)
	var keys []string
	for i, p := range w.patterns {
		iter := w.rdb.Scan(ctx, 0, p, 1000).Iterator()
		for iter.Next(ctx) {
			if k := iter.Val(); w.patternOf(k) == i && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
				if len(keys) == scanBatch {
					if w.syncKeys(ctx, keys) != nil {
						return
					}
					keys = keys[:0]
				}
			}
		}
		if err := iter.Err(); err != nil {
			// Without the full picture, vanished keys cannot be told.
			w.c.log.Warn("passive watch: rescan failed; retried at the next reconnect", "pattern", p, "err", err)
			return
		}
	}
	if w.syncKeys(ctx, keys) != nil {
		return
	}
	for key, h := range w.held {
		if seen[key] {
			continue
		}
		if h.deadline.passed(time.Now()) {
			w.expired(key)
		} else {
			w.released(key)
		}
	}
}

// syncKeys reads the keys' values and TTLs in one round trip.
func (w *nodeWatcher) syncKeys(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := w.rdb.Pipeline()
	sent := time.Now()
	gets := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		gets[i] = pipe.Get(ctx, k)
		ttls[i] = pipe.PTTL(ctx, k)
	}
	_, err := pipe.Exec(ctx)
	var rerr redis.Error
	if err != nil && !errors.Is(err, redis.Nil) && !errors.As(err, &rerr) {
		w.c.log.Warn("passive watch: rescan failed; retried at the next reconnect", "err", err)
		return err
	}
	for i, k := range keys {
		v, err := gets[i].Result()
		if err != nil {
			continue // deleted since SCAN, or not a string: its notification tells
		}
		w.update(k, v, ttls[i].Val(), sent, true)
	}
	return nil
}

// own reports whether a value was written by the lockscope library, whose
// locks report through the event stream.
func own(value string) bool {
	_, err := lock.ParseValue(value)
	return err == nil
}

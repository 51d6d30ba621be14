package collector

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/event/class"
	"github.com/lockscope/lockscope/lock"
	"github.com/redis/go-redis/v9"
)

// The passive watch of one Redis node, while this replica holds the watcher
// lease (watch_lease.go). Keyspace channels of the Watch patterns tell what
// happened to a watched key:
//
//	set (SET NX PX, SETNX)   read value and PTTL: a new holder is an acquisition
//	expire (EXPIRE, PEXPIRE) the holder's TTL moved: a renewal (or the TTL of a SETNX)
//	del                      a release
//	expired, evicted         the TTL lapsed (or memory pressure took the key)
//
// Limits. Notifications are fire-and-forget: while the watcher is
// disconnected it misses them, so it rescans the patterns (SCAN) at the start
// of a term and after every reconnect and reconciles: new holders become
// acquisitions, keys gone before their TTL releases, keys gone after it
// expirations. A hold shorter than one round trip (value deleted before the
// watcher reads it) is not seen. Values written by lockscope itself are
// skipped: those locks report through the event stream.

const renewSlack = 5 * time.Millisecond // PTTL is in whole milliseconds

// seedSlack is how far a deadline the state computed (from another
// replica's clock, a round trip after Redis set it) may lie from the one
// read now and still be the same.
const seedSlack = 250 * time.Millisecond

type passiveWatcher struct {
	c    *Follower
	t    *term
	node watchNode

	spacePrefix string         // __keyspace@<db>__:
	rules       []watchRule    // Options.Watch, deduplicated, in order
	chanIndex   map[string]int // keyspace channel pattern -> index in rules

	mu        sync.Mutex // guards held and waiting: the Redisson poller reads them too
	held      map[string]*passiveHold
	waiting   map[string]*redissonWaiters // keys whose Redisson waiters were seen
	fullShown bool
}

// passiveHold is a watched key's holder as last seen.
type passiveHold struct {
	value    string // the string, or a Redisson hash's content
	owner    string // its name
	since    time.Time
	deadline deadline
	redisson bool   // a Redisson lock: its waiters are polled (watch_redisson.go)
	mode     string // a Redisson read-write lock's mode
}

func newPassiveWatcher(c *Follower, t *term, n watchNode) *passiveWatcher {
	w := &passiveWatcher{
		c:           c,
		t:           t,
		node:        n,
		spacePrefix: n.spacePrefix(),
		chanIndex:   make(map[string]int),
		held:        make(map[string]*passiveHold),
		waiting:     make(map[string]*redissonWaiters),
	}
	w.rules = c.rules
	for i, r := range w.rules {
		w.chanIndex[w.spacePrefix+r.pattern] = i
	}
	return w
}

// run follows the node's keyspace channels until ctx (the term's) ends.
func (w *passiveWatcher) run(ctx context.Context) {
	channels := make([]string, 0, len(w.rules))
	for _, r := range w.rules {
		channels = append(channels, w.spacePrefix+r.pattern)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { w.pollRedisson(ctx) })
	w.c.follow(ctx, w.node.rdb, channels, func(ctx context.Context, first bool) {
		// A restarted Redis forgot what CONFIG SET changed, and
		// notifications were missed while away.
		w.node.cfg.apply(ctx)
		ok := w.resync(ctx, first)
		if first {
			w.t.rescanned(ok)
		}
		w.c.synced.Add(1)
	}, w.handle)
}

func (w *passiveWatcher) handle(ctx context.Context, m *redis.Message) {
	key, ok := strings.CutPrefix(m.Channel, w.spacePrefix)
	if !ok {
		return
	}
	// A key matching several patterns is announced once per pattern.
	if i, ok := w.chanIndex[m.Pattern]; !ok || i != w.patternOf(key) {
		return
	}
	switch m.Payload {
	case "set", "expire", "persist", "hset", "hincrby", "hdel":
		w.observe(ctx, key)
	case "del":
		w.deleted(ctx, key)
	case "expired", "evicted":
		w.expired(key)
	}
}

// patternOf returns the index of the first pattern matching key, or -1.
func (w *passiveWatcher) patternOf(key string) int {
	for i, r := range w.rules {
		if class.Match(r.pattern, key) {
			return i
		}
	}
	return -1
}

// observe reads key's value and TTL after a notification.
func (w *passiveWatcher) observe(ctx context.Context, key string) {
	r := readKeys(ctx, w.node.rdb, []string{key})[0]
	if r.failed != nil || r.gone {
		// Gone already: its del or expired follows. Connection errors:
		// the resync after reconnect catches up.
		return
	}
	w.update(&r, false)
}

// isLock reports whether what a watched key holds is a lock of another
// library (see watch_rule.go).
func (w *passiveWatcher) isLock(r *reading) bool {
	if w.c.internalKey(r.key) {
		return false // the collector's keys and fence counters
	}
	i := w.patternOf(r.key)
	if i >= 0 && w.rules[i].kind == watchSemaphore {
		return false // a semaphore's counter: the dashboard reads it
	}
	if r.hash {
		return r.rlkOK // a Redisson lock, or some other hash
	}
	if own(r.value) {
		return false // the library's own locks come through the stream
	}
	k := lock.ForeignKind(r.value)
	if i < 0 {
		return k != "" // no pattern told (the patterns match what Redis sent): the shape alone
	}
	if k != "" && (selfNamed[k] || w.rules[i].named) {
		return true
	}
	switch w.rules[i].kind {
	case watchAny:
		return true
	case watchTTL:
		return r.pttl >= 0
	}
	return false
}

// update records what a watched key holds now and emits what changed: an
// acquisition, a renewal, or (resync: found by a rescan, not seen acquired)
// a hold found. It reports whether key holds a lock now.
func (w *passiveWatcher) update(r *reading, resync bool) bool {
	now := w.c.opt.Now()
	key := r.key
	if !w.isLock(r) {
		// Was it a lock (PERSIST, or SET without expiry)? Its hold ended.
		w.released(key)
		return false
	}
	// Redis evaluated PTTL somewhere between sent and received: the
	// deadline lies in [sent+pttl, received+pttl] by the local clock.
	ttl, dl := r.deadline()
	owner := r.owner()
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.held[key]; h != nil && h.owner == owner {
		// The same holder (a Redisson thread re-entering its lock
		// changes the hash, not the holder).
		moved := !h.deadline.same(dl)
		prev := h.deadline
		h.value, h.deadline, h.mode = r.value, dl, r.rlock.Mode
		// SET NX PX raises "set" and "expire" together: the second one
		// finds the deadline where the first left it.
		if moved {
			w.emit(event.Event{Type: event.Renewed, Key: key, Owner: owner, TTL: ttl, TS: now.UnixNano(), Passive: true,
				Headroom: prev.headroom(r.sent)})
		}
		return true
	}
	prev, known := w.held[key]
	if prev != nil {
		// Another holder now: the previous hold ended, though its del (or
		// expiry) had not been seen yet when the key was read (a Redisson
		// waiter takes the lock the moment the holder's unlock deletes it).
		w.emit(event.Event{Type: event.Released, Key: key, Owner: prev.owner, Hold: max(now.Sub(prev.since), 0), TS: now.UnixNano(), Passive: true})
	}
	if !known && len(w.held) >= maxPassive {
		if !w.fullShown {
			w.fullShown = true
			w.c.log.Warn("passive watch: too many watched keys held at once; ignoring new ones (narrow the Watch patterns)", "max", maxPassive)
		}
		return false
	}
	w.held[key] = &passiveHold{value: r.value, owner: owner, since: now, deadline: dl, redisson: r.rlkOK, mode: r.rlock.Mode}
	if resync && !known {
		// Found held by a scan, not seen acquired: held at least since
		// now, or since when a checkpoint or the stream says it began
		// (a renewal of an unknown hold takes the key without counting an
		// acquisition; one of a known hold keeps its since).
		w.emit(event.Event{Type: event.Renewed, Key: key, Owner: owner, TTL: ttl, TS: now.UnixNano(), Passive: true})
		return true
	}
	e := event.Event{Type: event.Acquired, Key: key, Owner: owner, TTL: ttl, Attempts: 1, TS: now.UnixNano(), Passive: true}
	if r.rlkOK {
		// A Redisson waiter the watcher saw wait: its wait ends here.
		w.waitEnded(&e, r.rlock, now)
	}
	w.emit(e)
	return true
}

// adopt takes over a hold the state knew at the start of the term (seeded
// by the previous watcher's events), now that a rescan read the key: the
// same holder keeps its since; another one means the hold changed hands
// while nobody watched. It reports whether the hold was adopted; if not, it
// has been ended.
func (w *passiveWatcher) adopt(r *reading, s state.LockInfo) bool {
	if r.gone || !w.isLock(r) || !sameHolder(s.Owner, r) {
		w.emit(endOf(s, w.c.opt.Now()))
		return false
	}
	var dl deadline
	if !s.ExpiresAt.IsZero() {
		dl = deadline{lo: s.ExpiresAt.Add(-seedSlack), hi: s.ExpiresAt.Add(seedSlack)}
	}
	w.mu.Lock()
	w.held[r.key] = &passiveHold{value: r.value, owner: r.owner(), since: s.Since, deadline: dl, redisson: r.rlkOK, mode: r.rlock.Mode}
	w.mu.Unlock()
	return true
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

// headroom is what was left of the TTL, at least, when a renewal seen
// before sent landed: the old deadline was no earlier than lo, the renewal
// no later than sent (its notification had arrived). 0 when there was no
// TTL; 1ns when nothing was provably left.
func (d deadline) headroom(sent time.Time) time.Duration {
	if d.lo.IsZero() {
		return 0
	}
	return max(d.lo.Sub(sent), time.Nanosecond)
}

// passed reports whether the deadline has certainly passed at now.
func (d deadline) passed(now time.Time) bool { return !d.lo.IsZero() && now.After(d.hi) }

// deadline is the TTL r read and when the key expires by it (zero: none).
func (r *reading) deadline() (time.Duration, deadline) {
	if r.pttl <= 0 {
		return 0, deadline{}
	}
	// Redis evaluated PTTL somewhere between sent and received: the
	// deadline lies in [sent+pttl, received+pttl] by the local clock.
	return r.pttl, deadline{lo: r.sent.Add(r.pttl), hi: time.Now().Add(r.pttl)}
}

// deleted handles a "del" of key. It may be old news: the key was read
// after it was deleted and taken again (a Redisson hand-off: the unlock's
// HINCRBY, read once the next waiter holds it, then the DEL), and the
// hold is the one now held. So the key is read again: gone, the hold
// ended; the same holder with the same deadline, nothing changed since the
// reading that found it; anything else, the key changed hands (update
// ends the previous hold); the same holder with a new deadline took it
// anew.
func (w *passiveWatcher) deleted(ctx context.Context, key string) {
	r := readKeys(ctx, w.node.rdb, []string{key})[0]
	if r.failed != nil || r.gone || !w.isLock(&r) {
		w.released(key)
		return
	}
	_, dl := r.deadline()
	w.mu.Lock()
	h := w.held[key]
	same := h != nil && h.owner == r.owner()
	current := same && h.deadline.same(dl)
	w.mu.Unlock()
	if current {
		return
	}
	if same {
		w.released(key)
	}
	w.update(&r, false)
}

func (w *passiveWatcher) released(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.held[key]
	if h == nil {
		return
	}
	delete(w.held, key)
	now := w.c.opt.Now()
	w.emit(event.Event{Type: event.Released, Key: key, Owner: h.owner, Hold: max(now.Sub(h.since), 0), TS: now.UnixNano(), Passive: true})
}

func (w *passiveWatcher) expired(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.held[key]
	if h == nil {
		return
	}
	delete(w.held, key)
	now := w.c.opt.Now()
	w.emit(event.Event{Type: event.Expired, Key: key, Owner: h.owner, Hold: max(now.Sub(h.since), 0), TS: now.UnixNano(), Passive: true})
}

func (w *passiveWatcher) emit(e event.Event) { w.t.out.add(e) }

// internalKey reports whether key is one of lockscope's own keys (the
// stream, its checkpoint, presence and watcher keys, the fence counters):
// never a lock, whatever a wide watch pattern matches.
func (c *Follower) internalKey(key string) bool {
	return key == c.opt.Stream || strings.HasPrefix(key, c.opt.Stream+":") || strings.HasPrefix(key, lock.FencePrefix)
}

// resync reconciles the watched holds with a SCAN of the patterns; the
// first of a term also adopts the holds the state knew. It reports whether
// the scan completed.
func (w *passiveWatcher) resync(ctx context.Context, first bool) bool {
	if len(w.rules) == 0 {
		return true
	}
	seen := make(map[string]bool)
	var keys []string
	for i, r := range w.rules {
		p := r.pattern
		iter := w.node.rdb.Scan(ctx, 0, p, 1000).Iterator()
		for iter.Next(ctx) {
			if k := iter.Val(); w.patternOf(k) == i && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
				if len(keys) == scanBatch {
					if w.syncKeys(ctx, keys, first) != nil {
						return false
					}
					keys = keys[:0]
				}
			}
		}
		if err := iter.Err(); err != nil {
			// Without the full picture, vanished keys cannot be told.
			w.c.log.Warn("passive watch: rescan failed; retried at the next reconnect", "pattern", p, "err", err)
			return false
		}
	}
	if w.syncKeys(ctx, keys, first) != nil {
		return false
	}
	w.mu.Lock()
	var gone []string
	for key := range w.held {
		if !seen[key] {
			gone = append(gone, key)
		}
	}
	w.mu.Unlock()
	for _, key := range gone {
		w.mu.Lock()
		h := w.held[key]
		w.mu.Unlock()
		if h != nil && h.deadline.passed(time.Now()) {
			w.expired(key)
		} else {
			w.released(key)
		}
	}
	return true
}

// syncKeys reads the keys' values and TTLs and records them.
func (w *passiveWatcher) syncKeys(ctx context.Context, keys []string, first bool) error {
	if len(keys) == 0 {
		return nil
	}
	rs := readKeys(ctx, w.node.rdb, keys)
	for i := range rs {
		if err := rs[i].failed; err != nil {
			w.c.log.Warn("passive watch: rescan failed; retried at the next reconnect", "err", err)
			return err
		}
	}
	for i := range rs {
		r := &rs[i]
		found := true // a hold found by the rescan, not seen acquired
		if first {
			if s, ok := w.t.seed(r.key); ok {
				// Another holder than the state's took it meanwhile: an
				// acquisition.
				found = w.adopt(r, s)
			}
		}
		if r.gone {
			continue // deleted since SCAN: its notification tells
		}
		w.update(r, found)
	}
	return nil
}

// own reports whether a value was written by the lockscope library, whose
// locks report through the event stream.
func own(value string) bool {
	_, err := lock.ParseValue(value)
	return err == nil
}

package collector

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/ctxsleep"
	"github.com/lockscope/lockscope/lock"
)

// The watcher lease: one replica at a time follows other libraries' locks.
//
// Every replica started with Watch patterns competes for the watcher lease,
// a lock of lockscope's own library (watcherKey): fenced, renewed every
// second while held, and lost, its context cancelled, when a renewal cannot
// land before its TTL runs out. The holder watches; the others only read
// the stream. What the holder sees becomes passive events on the stream (the
// first partition's), written by a script that refuses a fence lower than
// the highest that has written (watcherFenceKey): once its successor has
// written, a replica that lost the lease cannot write, even before it knows
// it lost it. So every replica applies the same passive events in the same
// order, and a restarted one rebuilds them as it rebuilds the library's:
// from the checkpoint and the stream.
//
// A new term (the lease taken) begins by raising the fence, so that no
// earlier holder writes again, and by applying the stream up to its end
// (the previous holder's last events). Then every node is rescanned and
// Redis compared with the passive holds the state knows: a hold still there
// keeps the since the stream gave it (and moves its expiry if it was renewed
// while nobody watched); one gone has ended (expired if its TTL lapsed,
// else released); one whose value changed has changed hands.

// Watcher lease tuning: a lost holder is replaced within leaseTTL plus
// leaseRetry.
const (
	leaseTTL    = 3 * time.Second
	leaseRetry  = 250 * time.Millisecond
	catchUpWait = 5 * time.Second // the longest a new term waits to apply the stream's end
	maxPassive  = 100_000         // watched holds tracked per node; a pattern matching more is too broad
)

// lead competes for the watcher lease until ctx is done, and watches while
// it holds it.
func (c *Follower) lead(ctx context.Context, nodes []watchNode) {
	lc := lock.New(c.rdb, &lock.Options{Owner: "lockscope/" + c.opt.Replica})
	key := watcherKey(c.opt.Stream)
	opt := &lock.ObtainOptions{Fencing: true, Retry: lock.LinearBackoff(leaseRetry)}
	var bo backoff
	var failing string
	for {
		err := lc.Do(ctx, key, leaseTTL, opt, func(lctx context.Context) error {
			lease, _ := lock.FromContext(lctx)
			bo.reset()
			failing = ""
			c.log.Info("this replica holds the watcher lease: it follows other libraries' locks and writes what it sees to the stream",
				"fence", lease.Fence(), "watch", c.watchList())
			c.holdWatch(lctx, nodes, lease.Fence())
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, lock.ErrLost):
			c.log.Warn("lost the watcher lease (its renewal did not land in time): another replica takes over the passive watch", "err", err)
		case err != nil && err.Error() != failing:
			failing = err.Error()
			c.log.Warn("cannot take the watcher lease: no replica follows other libraries' locks until one can",
				"key", key, "fix", remedy(err, "the watcher lease's permissions (docs/acl.md)"), "err", err)
		}
		if !ctxsleep.Sleep(ctx, bo.next()) {
			return
		}
	}
}

// holdWatch watches every node for one term of the lease: until ctx (the
// lease's) ends, or the fence is refused.
func (c *Follower) holdWatch(ctx context.Context, nodes []watchNode, fence int64) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := newPassiveWriter(c, fence, cancel)
	if err := out.claim(ctx); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("cannot write to the stream as the watcher: the passive watch is off until it can",
				"fix", remedy(err, "the passive watch's permissions (docs/acl.md)"), "err", err)
			ctxsleep.Sleep(ctx, leaseTTL)
		}
		return
	}
	c.catchUp(ctx)
	t := &term{c: c, out: out, left: len(nodes), done: make(chan struct{}), seeds: make(map[string]state.LockInfo)}
	for _, h := range c.agg.PassiveHeld(maxPassive * len(nodes)) {
		t.seeds[h.Key] = h
	}
	var wg sync.WaitGroup
	wg.Go(func() { out.run(ctx) })
	for _, n := range nodes {
		wg.Go(func() { newPassiveWatcher(c, t, n).run(ctx) })
	}
	wg.Go(func() { t.settle(ctx) })
	wg.Wait()
}

// catchUp waits (at most catchUpWait) until the stream's entries written so
// far are applied: the comparison of a new term starts from the previous
// holder's last word.
func (c *Follower) catchUp(ctx context.Context) {
	if !c.replica {
		return // a shared group delivers other entries to other collectors
	}
	si, _, err := c.streamInfo(ctx)
	if err != nil || si == nil || si.unknown || si.lastGenerated == "" || si.lastGenerated == "0-0" {
		return
	}
	deadline := time.Now().Add(catchUpWait)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		done := c.lastApplied != "" && !idLess(c.lastApplied, si.lastGenerated)
		c.mu.Unlock()
		if done || !ctxsleep.Sleep(ctx, 10*time.Millisecond) {
			return
		}
	}
	c.log.Warn("the watcher took over before applying the stream's last entries: its first rescan may repeat some of the previous watcher's events")
}

// term is one holding of the watcher lease.
type term struct {
	c   *Follower
	out *passiveWriter

	mu     sync.Mutex
	seeds  map[string]state.LockInfo // passive holds the state knew at the start, not yet found by a rescan
	left   int                       // nodes whose first rescan is not done
	failed bool                      // a first rescan failed: seeds left are not known gone
	done   chan struct{}             // closed when left reaches 0
}

// seed returns (and forgets) the state's hold of key at the start of the
// term.
func (t *term) seed(key string) (state.LockInfo, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.seeds[key]
	if ok {
		delete(t.seeds, key)
	}
	return s, ok
}

// rescanned records a node's first rescan of the term.
func (t *term) rescanned(ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = t.failed || !ok
	if t.left--; t.left == 0 {
		close(t.done)
	}
}

// settle ends, once every node has been rescanned, the passive holds the
// state knew that no rescan found: they ended while nobody watched.
func (t *term) settle(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-t.done:
	}
	t.mu.Lock()
	seeds, failed := t.seeds, t.failed
	t.seeds = nil
	t.mu.Unlock()
	if failed {
		if len(seeds) > 0 {
			t.c.log.Warn("a node could not be rescanned: passive holds not found there stay as they were until it can", "holds", len(seeds))
		}
		return
	}
	now := t.c.opt.Now()
	for _, s := range seeds {
		t.out.add(endOf(s, now))
	}
}

// endOf is the event that ends hold s, found gone at now: an expiration if
// its TTL had lapsed, else a release.
func endOf(s state.LockInfo, now time.Time) event.Event {
	e := event.Event{Type: event.Released, Key: s.Key, Owner: s.Owner, Hold: max(now.Sub(s.Since), 0), TS: now.UnixNano(), Passive: true}
	if !s.ExpiresAt.IsZero() && !now.Before(s.ExpiresAt) {
		e.Type, e.TS, e.Hold = event.Expired, s.ExpiresAt.UnixNano(), max(s.ExpiresAt.Sub(s.Since), 0)
	}
	return e
}

// sameHolder reports whether a hold's owner names the holder of what r
// read: its name, or (a string value named by an older version) its
// fingerprint part.
func sameHolder(owner string, r *reading) bool {
	name := r.owner()
	if owner == name {
		return true
	}
	if r.hash {
		return false
	}
	i, j := strings.LastIndexByte(owner, ' '), strings.LastIndexByte(name, ' ')
	return i >= 0 && j >= 0 && owner[i:] == name[j:]
}

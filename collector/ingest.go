package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/ctxsleep"
	"github.com/redis/go-redis/v9"
)

// Stream ingest: one fetcher goroutine reads entries through the consumer
// group and hands them to the applier (the goroutine of Run) over a channel
// holding one batch, so reading the next batch overlaps aggregating this
// one. An entry is acknowledged only after the Aggregator has applied it;
// a collector that dies between the two leaves the entry pending, and the
// next collector claims it.

// batch is what one read returned.
type batch struct {
	msgs []redis.XMessage
	// claimed marks entries that were delivered before (XAUTOCLAIM, or this
	// consumer's own pending list): some may be entries this process
	// applied but could not acknowledge.
	claimed bool
	gen     uint64 // the group incarnation the entries were read from
	// barrier, when set, carries no entries: the applier closes it once
	// everything handed over before it is applied and acknowledged (or
	// remembered as unacknowledged).
	barrier chan struct{}
	// replay marks entries read back at start (see rebuild): applied by
	// event time, never acknowledged; count false mutes their metrics.
	// events carries already decoded events (a checkpoint's holders).
	replay bool
	count  bool
	events []event.Event
}

// ackTimeout bounds the final acknowledgements, which run after Run's context
// is cancelled.
const ackTimeout = 5 * time.Second

// maxUnacked bounds the applied entries whose XACK failed and is retried.
// Past it the oldest are forgotten: never lost, but a later claim may apply
// them twice. Unreachable in practice: while XACK fails so do reads, and no
// more than two reads (128 entries) are in flight.
const maxUnacked = 1 << 16

func (c *Follower) ingest(ctx context.Context) {
	ch := make(chan batch, 1)
	go c.fetch(ctx, ch)
	a := applier{c: c, unacked: make(map[string]struct{})}
	for b := range ch {
		a.apply(b)
	}
	a.retryAcks()
	a.malformed.flush(c.log)
}

type fetcher struct {
	c       *Follower
	bo      backoff
	healthy bool
	failing string    // text of the failure last reported
	logged  time.Time // when that failure was last logged
}

// fetch reads until ctx is done and closes out. Reads that complete after
// ctx is cancelled are still handed over: they are pending on this consumer
// and the applier acknowledges them.
func (c *Follower) fetch(ctx context.Context, out chan<- batch) {
	defer close(out)
	f := fetcher{c: c}
	claimEvery := min(max(c.opt.ClaimMinIdle/2, 100*time.Millisecond), 15*time.Second)
	ready := false
	var nextClaim time.Time
	for ctx.Err() == nil {
		if !ready {
			// Entries already handed over are still pending: they must be
			// applied before this consumer's pending list is read again.
			settle(out)
			if c.replica && !c.rebuilt {
				if err := c.rebuild(ctx, out); err != nil {
					f.fail(ctx, err)
					continue
				}
				c.rebuilt = true
				close(c.replayed)
			}
			if err := c.setup(ctx); err != nil {
				f.fail(ctx, err)
				continue
			}
			if err := c.readOwnPending(ctx, out); err != nil {
				f.fail(ctx, err)
				continue
			}
			ready, nextClaim = true, time.Time{}
			// The group is read: ready, without waiting for the first
			// blocking read to return.
			f.ok()
		}
		if !time.Now().Before(nextClaim) {
			// XAUTOCLAIM also returns this consumer's own entries once idle
			// long enough: none may be in flight.
			settle(out)
			if err := c.claim(ctx, out); err != nil {
				ready = false
				f.fail(ctx, err)
				continue
			}
			nextClaim = time.Now().Add(claimEvery)
		}
		gen := c.groupGen.Load()
		readAt := time.Now()
		asked := c.readCount()
		msgs, scripted, err := c.readGroup(ctx, ">", asked)
		if scripted && err == nil && len(msgs) == 0 {
			// Caught up: wait for the next entry, and take that one alone
			// (a read that blocks cannot run in the script).
			msgs, err = c.xreadGroup(ctx, ">", 1, c.opt.Block)
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			if ctx.Err() != nil {
				return
			}
			ready = false
			f.fail(ctx, err)
			continue
		}
		f.ok()
		n := len(msgs)
		if n > 0 {
			c.sized(msgs)
			c.countFresh(msgs)
			out <- batch{msgs: msgs, gen: gen}
		}
		if readBytes(msgs) >= readBudget {
			// The script stopped at the budget: more is waiting.
			continue
		}
		if n > 0 && n < asked {
			pace(ctx, readAt)
		}
	}
}

// readBudget is about the most bytes one read of the stream brings in
// (and one entry more): the read script (read.go) stops there. Without the
// script (a Redis user that may not run it), the next read asks for as
// many entries as readBudget holds at the size of the previous read's
// largest entry: an emitter's entries (some 100 bytes per event with
// 30-byte keys, 2048 events at most: about 200 KB) still come Count at a
// time, a stream of 4 MB entries comes 4 at a time.
const readBudget = 16 << 20

// count is how many entries the next read asks for: before any read, as
// many as readBudget holds at the largest size an entry may have.
func (c *Follower) count() int {
	if c.nextRead <= 0 {
		return nextCount(event.MaxBatchBytes, c.opt.Count)
	}
	return c.nextRead
}

// sized sets the next read's count from the entries a read returned (none:
// unchanged): see readBudget.
func (c *Follower) sized(msgs []redis.XMessage) {
	if len(msgs) == 0 {
		return
	}
	largest := 1
	for _, m := range msgs {
		largest = max(largest, entryBytes(m))
	}
	c.nextRead = nextCount(largest, c.opt.Count)
}

// nextCount is how many entries of largest bytes fit readBudget, within 1
// and most.
func nextCount(largest, most int) int {
	return min(max(readBudget/max(largest, 1), 1), most)
}

// readPace is the least time between the starts of two reads that find
// entries. A busy stream gets an entry per emitter batch, and without a
// pause each would cost a read, an acknowledgement and the wake-ups of the
// goroutines and threads around them, which cost serve two thirds as much
// CPU as applying the entry's events (512 an entry when this was
// measured; the emitter's batch is 2048 now). Each burst of work after an idle
// moment also puts the Go runtime's monitor thread (sysmon) back to waking
// every 20 µs for a millisecond or more: on the project's VM, where a sleep
// and a wake-up cost tens of microseconds, that was an eighth of serve's CPU
// at 20 ms. Serve following 250 000 events/s spent 12 % less CPU per event
// with 5 ms than with none, 25–28 % less again with 20 ms, and a warmed-up
// serve 15–25 % less again with 50 ms; 100 ms gained little more
// (BenchmarkServeLive, BENCHMARKS.md, issue 16). Entries written meanwhile
// wait at most this long more: an event reaches the queries within 55 ms at
// p99 (25 ms with 20 ms, BenchmarkFreshness), well within the dashboard's
// refresh of 2 s or more. A read that finds the stream idle is followed by
// one that blocks for the next entry, so the first entry after a quiet
// spell is read at once.
const readPace = 50 * time.Millisecond

// pace waits until readPace has passed since readAt, or ctx ends.
func pace(ctx context.Context, readAt time.Time) {
	d := readPace - time.Since(readAt)
	if d <= 0 {
		return
	}
	ctxsleep.Sleep(ctx, d)
}

// settle waits until the applier has applied and acknowledged every batch
// handed over so far.
func settle(out chan<- batch) {
	done := make(chan struct{})
	out <- batch{barrier: done}
	<-done
}

// fail reports err as the ingest health, logs it (again only when it changes
// or every 30s) and waits before the next attempt.
func (f *fetcher) fail(ctx context.Context, err error) {
	reason := f.c.describe(err)
	f.c.agg.SetPartitionHealth(f.c.opt.Partition, reason)
	f.healthy = false
	if msg := reason.Error(); msg != f.failing || time.Since(f.logged) >= 30*time.Second {
		f.c.log.Warn("stream ingest failing; keeping the last state and retrying", "err", msg)
		f.failing, f.logged = msg, time.Now()
	}
	ctxsleep.Sleep(ctx, f.bo.next())
}

func (f *fetcher) ok() {
	if f.healthy {
		return
	}
	if f.failing != "" {
		f.c.log.Info("stream ingest reading again", "after", f.failing)
	}
	f.c.agg.SetPartitionHealth(f.c.opt.Partition, nil)
	f.healthy, f.failing = true, ""
	f.bo.reset()
}

// describe turns a Redis error into the reason Health reports.
func (c *Follower) describe(err error) error {
	var rerr redis.Error
	switch {
	case errors.Is(err, errDuplicateReplica):
		return err
	case redis.HasErrorPrefix(err, "NOGROUP"):
		return fmt.Errorf("collector: consumer group %q of stream %q is missing (Redis restarted without persistence, or the stream or group was deleted); recreating it: %w", c.opt.Group, c.opt.Stream, err)
	case errors.As(err, &rerr):
		return fmt.Errorf("collector: reading stream %q as group %q: Redis answered: %w", c.opt.Stream, c.opt.Group, err)
	default:
		return fmt.Errorf("collector: Redis unreachable: %w", err)
	}
}

// setup makes sure the group exists and checks for a gap before reading.
func (c *Follower) setup(ctx context.Context) error {
	si, groups, err := c.inspect(ctx)
	var rerr redis.Error
	switch {
	case err == nil:
		if _, ok := groups[c.opt.Group]; ok {
			c.warnShared(ctx)
			return nil
		}
	case errors.As(err, &rerr):
		// XINFO refused (an ACL without it): create the group blindly,
		// BUSYGROUP says it exists. Lag and gaps go unreported.
		if !c.noInfoShown.Swap(true) {
			c.log.Warn("XINFO refused: stream lag and trimmed-entry detection are off", "fix", remedy(err, "+xinfo"), "err", err)
		}
		si = &streamInfo{unknown: true}
	default:
		return err
	}
	start, err := c.startID(ctx, si)
	if err != nil {
		return err
	}
	err = c.rdb.XGroupCreateMkStream(ctx, c.opt.Stream, c.opt.Group, start).Err()
	switch {
	case err == nil:
		c.groupGen.Add(1)
		c.log.Info("created consumer group", "start", start)
	case redis.HasErrorPrefix(err, "BUSYGROUP"):
		// Another collector created it in between.
	default:
		return err
	}
	return nil
}

// warnShared logs, as an error, collectors that share a configured group:
// each of them sees only part of every lock's events.
func (c *Follower) warnShared(ctx context.Context) {
	if c.replica || c.sharedWarned {
		return
	}
	cs, err := c.rdb.XInfoConsumers(ctx, c.opt.Stream, c.opt.Group).Result()
	if err != nil {
		return
	}
	for _, x := range cs {
		if x.Name != c.opt.Consumer && x.Idle < 30*time.Second {
			c.sharedWarned = true
			c.log.Error("another collector reads the same consumer group: the stream is split between them, so each shows phantom holders and expirations. Drop --group (LOCKSCOPE_GROUP) so that every replica reads every event through its own group",
				"other_consumer", x.Name)
			return
		}
	}
}

// startID is where a missing group starts.
//
// A collector that has applied entries and finds its group gone resumes after
// the last entry it applied when the stream still reaches that far (the group
// was deleted), and from the beginning when it does not (Redis lost its data
// and the emitters recreated the stream: everything in it is new). A
// collector that has applied nothing starts Backfill ago by the server clock.
func (c *Follower) startID(ctx context.Context, si *streamInfo) (string, error) {
	c.mu.Lock()
	last := c.lastApplied
	c.mu.Unlock()
	if last != "" {
		if si == nil || !si.unknown && idLess(si.lastGenerated, last) {
			return "0", nil
		}
		return last, nil
	}
	if c.opt.Backfill < 0 {
		return "$", nil
	}
	now, err := c.rdb.Time(ctx).Result()
	var rerr redis.Error
	if errors.As(err, &rerr) {
		now, err = time.Now(), nil // TIME refused: the local clock is close enough
	}
	if err != nil {
		return "", err
	}
	ms := now.UnixMilli() - c.opt.Backfill.Milliseconds()
	if ms <= 0 {
		return "0", nil
	}
	return strconv.FormatInt(ms, 10) + "-0", nil
}

// readOwnPending re-reads the entries this consumer name read before without
// acknowledging them (a restarted collector with a fixed Consumer, or replies
// lost with the connection).
func (c *Follower) readOwnPending(ctx context.Context, out chan<- batch) error {
	after := "0"
	for {
		gen := c.groupGen.Load()
		msgs, _, err := c.readGroup(ctx, after, c.readCount())
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		n := len(msgs)
		if n > 0 {
			after = msgs[n-1].ID
			c.sized(msgs)
			out <- batch{msgs: msgs, claimed: true, gen: gen}
		}
		if n == 0 {
			return nil
		}
	}
}

// claim takes over the entries that other consumers read and left pending
// for longer than ClaimMinIdle: they died before acknowledging.
func (c *Follower) claim(ctx context.Context, out chan<- batch) error {
	start := "0-0"
	for {
		gen := c.groupGen.Load()
		msgs, next, deleted, err := c.claimGroup(ctx, start, c.readCount())
		if err != nil {
			return err
		}
		if deleted > 0 {
			// Trimmed while pending: read by a consumer that died, never applied.
			c.agg.StreamGap(int64(deleted))
			c.log.Warn("pending stream entries were trimmed before any collector applied them: events lost", "missing", deleted)
		}
		c.sized(msgs)
		if len(msgs) > 0 {
			c.log.Info("claimed pending entries of a dead consumer", "entries", len(msgs))
			out <- batch{msgs: msgs, claimed: true, gen: gen}
		}
		if next == "0-0" || next == "" || next == start {
			c.forgetStaleConsumers(ctx)
			return nil
		}
		start = next
	}
}

// staleConsumerAfter is how long a consumer with nothing pending must have
// been silent before it is removed from the group. Every collector restart
// with the default Consumer name leaves one behind.
const staleConsumerAfter = time.Hour

// forgetStaleConsumers removes consumers that hold nothing and have been idle
// for staleConsumerAfter. Best effort: a user without XINFO CONSUMERS or
// XGROUP DELCONSUMER merely keeps the clutter.
func (c *Follower) forgetStaleConsumers(ctx context.Context) {
	if c.replica {
		c.forgetStaleReplicas(ctx)
	}
	cs, err := c.rdb.XInfoConsumers(ctx, c.opt.Stream, c.opt.Group).Result()
	if err != nil {
		return
	}
	for _, x := range cs {
		if x.Name == c.opt.Consumer || x.Pending > 0 || x.Idle < c.staleAfter {
			continue
		}
		// A live collector polls every Block, which resets its idle
		// time: one silent for an hour is gone, and cannot read
		// between XINFO and DELCONSUMER.
		if n, err := c.rdb.XGroupDelConsumer(ctx, c.opt.Stream, c.opt.Group, x.Name).Result(); err == nil {
			c.log.Info("removed idle consumer from the group", "consumer", x.Name, "idle", x.Idle.Round(time.Second), "pending", n)
		}
	}
}

// forgetStaleReplicas destroys the groups of replicas that have not read for
// staleConsumerAfter (a replica renamed, or scaled down). Best effort, like
// forgetStaleConsumers.
func (c *Follower) forgetStaleReplicas(ctx context.Context) {
	_, groups, err := c.streamInfo(ctx)
	if err != nil {
		return
	}
	for name := range groups {
		if name == c.opt.Group || !strings.HasPrefix(name, replicaGroupPrefix) {
			continue
		}
		cs, err := c.rdb.XInfoConsumers(ctx, c.opt.Stream, name).Result()
		if err != nil {
			continue
		}
		live := false
		for _, x := range cs {
			live = live || x.Idle < c.staleAfter
		}
		if live {
			continue
		}
		if err := c.rdb.XGroupDestroy(ctx, c.opt.Stream, name).Err(); err == nil {
			c.log.Info("removed the consumer group of a replica gone for good", "group", name, "idle_over", c.staleAfter)
		}
	}
}

// applier is the goroutine of Run: it decodes, applies and acknowledges.
type applier struct {
	c         *Follower
	gen       uint64
	evs       []event.Event
	ids       []string
	unacked   map[string]struct{} // applied, XACK failed: retried, never applied twice
	pending   []string            // the same IDs in order
	malformed rateLog
}

func (a *applier) apply(b batch) {
	c := a.c
	if b.barrier != nil {
		a.retryAcks()
		close(b.barrier)
		return
	}
	if b.replay {
		a.replay(b)
		return
	}
	if b.gen != a.gen {
		// The group was recreated: its pending list is new.
		a.gen = b.gen
		clear(a.unacked)
		a.pending = a.pending[:0]
	}
	a.evs, a.ids = a.evs[:0], a.ids[:0]
	var bad, missing int
	last := ""
	for i := range b.msgs {
		m := &b.msgs[i]
		a.ids = append(a.ids, m.ID)
		if last == "" || idLess(last, m.ID) {
			last = m.ID
		}
		if b.claimed {
			if _, done := a.unacked[m.ID]; done {
				continue
			}
		}
		if m.Values == nil {
			// Trimmed while pending on this consumer.
			missing++
			continue
		}
		if size, ok := oversized(*m); ok {
			bad++
			a.malformed.note(c.log, m.ID, errOversize(size))
			continue
		}
		var err error
		if a.evs, err = event.DecodeAppend(a.evs, m.Values); err != nil {
			bad++
			a.malformed.note(c.log, m.ID, err)
		}
		if len(a.evs) >= decodeAhead {
			a.flush(false, false)
		}
	}
	a.flush(false, false)
	if bad > 0 {
		c.agg.Malformed(bad)
	}
	if missing > 0 {
		c.agg.StreamGap(int64(missing))
		c.log.Warn("pending stream entries were trimmed before they were applied: events lost", "missing", missing)
	}
	c.entries.Add(int64(len(b.msgs)))
	c.mu.Lock()
	if c.lastApplied == "" || idLess(c.lastApplied, last) {
		c.lastApplied = last
	}
	c.mu.Unlock()
	a.ack(a.ids)
	a.malformed.flushIfDue(c.log)
}

// replay applies a replay batch: by event time, not acknowledged.
func (a *applier) replay(b batch) {
	c := a.c
	if len(b.events) > 0 {
		c.agg.Replay(b.events, b.count)
		return
	}
	a.evs = a.evs[:0]
	bad := 0
	for i := range b.msgs {
		var err error
		if a.evs, err = event.DecodeAppend(a.evs, b.msgs[i].Values); err != nil {
			bad++
		}
		if len(a.evs) >= decodeAhead {
			a.flush(true, b.count)
		}
	}
	if bad > 0 && b.count {
		c.agg.Malformed(bad)
	}
	a.flush(true, b.count)
	c.entries.Add(int64(len(b.msgs)))
}

// decodeAhead is how many decoded events the applier applies at once. A read
// returns up to Count entries of up to an emitter batch each (64 × 2048
// events by default): decoded all at once, 64 entries of 512 events (the
// batch when this was measured) filled a slice of 32 768 events
// (5.6 MB) before the first was applied, which the applier then read back
// from memory, and which grew from nothing in some fifteen steps the first
// time, costing a newly started serve some 100 ms (BENCHMARKS.md, issue 16).
// Applied every few entries, the events are still in the cache.
const decodeAhead = 4096

// flush applies the decoded events: live, or for a replay by event time,
// counted only when count is set.
func (a *applier) flush(replay, count bool) {
	if len(a.evs) == 0 {
		return
	}
	if replay {
		a.c.agg.Replay(a.evs, count)
	} else {
		a.c.agg.Apply(a.evs)
	}
	a.c.applied.Add(int64(len(a.evs)))
	// Drop references into the entries so they can be collected.
	clear(a.evs)
	a.evs = a.evs[:0]
}

// ack acknowledges ids together with earlier failed acknowledgements.
func (a *applier) ack(ids []string) {
	c := a.c
	all := append(a.pending, ids...)
	if len(all) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	err := c.rdb.XAck(ctx, c.opt.Stream, c.opt.Group, all...).Err()
	cancel()
	switch {
	case err == nil, redis.HasErrorPrefix(err, "NOGROUP"):
		// Without the group there is nothing left to acknowledge.
		clear(a.unacked)
		a.pending = all[:0]
		return
	}
	if len(all) > maxUnacked {
		for _, id := range all[:len(all)-maxUnacked] {
			delete(a.unacked, id)
		}
		all = append(all[:0], all[len(all)-maxUnacked:]...)
	}
	for _, id := range ids {
		a.unacked[id] = struct{}{}
	}
	a.pending = all
	c.log.Debug("XACK failed; retrying with the next batch", "entries", len(all), "err", err)
}

func (a *applier) retryAcks() {
	if len(a.pending) > 0 {
		a.ack(nil)
	}
}

// rateLog logs malformed entries at most once per interval, with a count.
type rateLog struct {
	n      int
	lastID string
	err    error
	logged time.Time
}

const malformedLogEvery = 10 * time.Second

func (r *rateLog) note(log *slog.Logger, id string, err error) {
	r.n++
	r.lastID, r.err = id, err
	r.flushIfDue(log)
}

func (r *rateLog) flushIfDue(log *slog.Logger) {
	if r.n > 0 && time.Since(r.logged) >= malformedLogEvery {
		r.flush(log)
	}
}

func (r *rateLog) flush(log *slog.Logger) {
	if r.n == 0 {
		return
	}
	log.Warn("skipped malformed stream entries (counted, acknowledged)", "count", r.n, "last_id", r.lastID, "err", r.err)
	r.n, r.logged = 0, time.Now()
}

// remedy says what to do about a command Redis refused: grant the permission
// when an ACL refused it (NOPERM), free the key when it holds another type
// (WRONGTYPE: someone wrote a plain value under lockscope's key), else just
// that it was refused.
func remedy(err error, grant string) string {
	switch {
	case redis.HasErrorPrefix(err, "NOPERM"):
		return "grant " + grant + " to the collector's Redis user"
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return "the key holds another type of value: delete it or give lockscope another key (--stream)"
	default:
		return "Redis refused the command"
	}
}

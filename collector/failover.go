package collector

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// After a failover: Redis replicates asynchronously, so a replica promoted
// when its primary died may lack the primary's newest writes, stream
// entries and the group's reads among them. The collector notices at its
// next poll of the stream (every second): its group was last delivered an
// entry older than the last one it applied, which only a Redis that lost
// writes does (delivery comes before applying; trimming never moves a
// group back). If that entry is gone too, the failover lost it. The
// collector says so plainly, counts as lost only the entries it had not
// read, and the gap tracker takes the new primary's counters as its
// baseline, so the other history's deficit is not reported as entries
// trimmed unread.
//
// The group's position may also have moved on before the poll: a read that
// the client retried onto the new primary by itself, and new entries there,
// put the group past everything the collector applied, or is applying. The
// counters tell it then (Redis 7): since the previous poll, this collector
// alone has read more entries added after it than the group has been
// delivered of them (its entries-read now, less the stream's entries-added
// then, which was the poll's last entry's place in the stream; trimming and
// XDEL change neither, and entries added but not read yet do not count).
// Some of the entries it read are not in this stream's history: Redis lost
// them.

// lostReadWrites says that Redis lost entries this collector had read.
const lostReadWrites = "Redis lost writes (a failover to a replica that had not received them, or a restart): the stream no longer holds entries this collector had read (they stay in its picture; a replica that rebuilds now will not see them). Locks written in that window may be gone too: look for overlaps with cause vanished"

// checkLostWrites is called by inspect, with gaps.mu held, for the group g
// of the stream si.
func (c *Follower) checkLostWrites(ctx context.Context, si *streamInfo, g groupInfo) error {
	c.mu.Lock()
	applied := c.lastApplied
	c.mu.Unlock()
	t := &c.gaps
	if applied == "" || applied == "0" || si.unknown || applied == t.backAt || !idLess(g.lastDelivered, applied) {
		return nil
	}
	gone, err := c.entryGone(ctx, applied)
	if err != nil {
		return err // asked again at the next poll
	}
	t.backAt = applied
	args := []any{"last_applied", applied, "group_last_delivered", g.lastDelivered, "last_entry_now", si.lastGenerated}
	if !gone {
		c.log.Warn("Redis lost the consumer group's last reads (the entries are there): entries this collector applied are read again", args...)
		return nil
	}
	t.rebase = true
	// At the last poll the stream ended at t.last with t.lag entries left
	// to read: if that entry is gone too, those went with the failover.
	if t.last != "" && idLess(applied, t.last) && t.lag > 0 {
		if unread, err := c.entryGone(ctx, t.last); err == nil && unread {
			c.agg.StreamGap(t.lag)
			c.log.Warn("Redis lost writes (a failover to a replica that had not received them, or a restart): the stream no longer holds entries this collector had read, nor some it had not: events lost. Locks written in that window may be gone too: look for overlaps with cause vanished",
				append(args, "last_entry_seen", t.last, "missing_about", t.lag)...)
			return nil
		}
	}
	c.log.Warn(lostReadWrites, args...)
	return nil
}

// freshReads counts the entries this collector read as new (">") after a
// poll's last entry, between that poll and the next: entries added after
// that poll, as IDs only grow (its backlog then is not counted).
type freshReads struct {
	after string // the stream's last entry at the poll
	added int64  // its entries-added then
	gen   uint64 // the group's generation then
	known bool   // entries-added was known (Redis 7)
	n     atomic.Int64
}

// countFresh counts, for the lost-writes check, the entries a read as new
// brought that came after the last poll's last entry.
func (c *Follower) countFresh(msgs []redis.XMessage) {
	f := c.fresh.Load()
	if f == nil {
		return
	}
	var n int64
	for _, m := range msgs {
		if idLess(f.after, m.ID) {
			n++
		}
	}
	f.n.Add(n)
}

// checkReadTooMuch is checkLostWrites' second test: read, the new entries
// this collector had read since the previous poll, counted before its XINFO
// (so each was delivered before the group's figures were taken), against
// the entries the group was delivered since. It then starts the count for
// the next poll. Called by inspect with gaps.mu held.
func (c *Follower) checkReadTooMuch(prev *freshReads, read int64, si *streamInfo, g groupInfo) {
	gen := c.groupGen.Load()
	if !c.gaps.rebase && prev != nil && prev.known && prev.gen == gen && g.entriesReadValid {
		if delivered := max(g.entriesRead-prev.added, 0); read > delivered {
			c.gaps.rebase = true
			c.log.Warn(lostReadWrites, "entries_read", read, "group_delivered", delivered,
				"last_entry_before", prev.after, "last_entry_now", si.lastGenerated)
		}
	}
	c.fresh.Store(&freshReads{after: si.lastGenerated, added: si.entriesAdded, gen: gen, known: si.hasCounters})
}

// entryGone reports whether the stream has no entry id.
func (c *Follower) entryGone(ctx context.Context, id string) (bool, error) {
	msgs, err := c.rdb.XRangeN(ctx, c.opt.Stream, id, id, 1).Result()
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return false, nil // XRANGE refused (an ACL without it): not known
	}
	return err == nil && len(msgs) == 0, err
}

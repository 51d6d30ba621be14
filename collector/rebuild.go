package collector

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replicas and restarts.
//
// Every replica reads the whole stream through a consumer group of its own,
// replicaGroupPrefix + its replica name, so any number of replicas show the
// same picture (a shared group would split the stream: each replica would
// see a lock's acquire without its release). At start a replica rebuilds its
// picture from what Redis holds before it reads new entries:
//
//  1. the checkpoint (CheckpointKey), written every few seconds by every
//     live replica: the holders older than the stream window replayed
//     below, each checked against its lock key (gone: dropped; a value the
//     library wrote: taken from the value, with the holder's true since);
//  2. the stream from Backfill ago (or, after a longer outage, from shortly
//     before the checkpoint) up to its last entry, applied by event time;
//     entries its previous incarnation had read are applied muted (their
//     counts were exported before the restart);
//  3. then its group is recreated at the last replayed entry, so no entry
//     is applied twice and none out of order (a dead incarnation's pending
//     entries are part of the replay, not re-delivered 30 s later).

// isReplayed reports whether the rebuild at start is done (always, with a
// shared group).
func (c *Follower) isReplayed() bool {
	select {
	case <-c.replayed:
		return true
	default:
		return false
	}
}

// rebuild restores the state at start (see above) and leaves the replica's
// group positioned after the replayed entries.
func (c *Follower) rebuild(ctx context.Context, out chan<- batch) error {
	si, groups, err := c.streamInfo(ctx)
	if err != nil {
		return err
	}
	stoppedAt, err := c.claimPresence(ctx)
	if err != nil {
		return err
	}
	g, existed := groups[c.opt.Group]
	now, err := c.serverTime(ctx)
	if err != nil {
		return err
	}
	start := now.Add(-c.opt.Backfill)
	if c.opt.Backfill < 0 {
		start = now
	}
	ck, ckErr := c.readCheckpoint(ctx)
	if ckErr != nil {
		c.log.Warn("could not read the checkpoint: holders older than the replayed stream are missing until they change", "err", ckErr)
	}
	if ck != nil && ck.at.Add(-c.ckptMinAge).Before(start) {
		start = ck.at.Add(-c.ckptMinAge)
	}
	end := "0"
	if si != nil {
		end = si.lastGenerated
	}
	keepGroup := false // XGROUP DESTROY refused: replay up to the group's position only
	if existed {
		// Probe the permission on a group that does not exist.
		err := c.rdb.XGroupDestroy(ctx, c.opt.Stream, c.opt.Group+":probe").Err()
		var rerr redis.Error
		if errors.As(err, &rerr) {
			keepGroup = true
			end = g.lastDelivered
			c.log.Warn("XGROUP DESTROY refused: after a restart, entries read but not acknowledged before it may be applied twice", "fix", remedy(err, "+xgroup|destroy"), "err", err)
		} else if err != nil {
			return err
		}
	}
	counted := "" // entries up to this ID were counted before the restart
	if existed {
		counted = g.lastDelivered
		c.reportTrimmedWhileDown(si, g)
		// Nothing the previous incarnation did not read is left out.
		if id, ok := parseID(counted); ok && time.UnixMilli(int64(id.ms)).Before(start) {
			start = time.UnixMilli(int64(id.ms))
		}
	}

	t0 := time.Now()
	c.agg.BeginReplay(start)
	restored, restoredExps := 0, 0
	if ck != nil && c.opt.Partition == 0 {
		restoredExps = c.restoreExpirations(ck, start)
	}
	if ck != nil {
		evs, err := c.verifyHolders(ctx, ck.holders, start.UnixNano(), now)
		if err != nil {
			c.log.Warn("could not check the checkpoint's holders against their keys: holders older than the replayed stream are missing until they change", "err", err)
		} else if len(evs) > 0 {
			out <- batch{events: evs, replay: true}
			restored = len(evs)
		}
	}
	entries, err := c.replayRange(ctx, out, start, end, counted)
	if err != nil {
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			return err
		}
		c.log.Warn("XRANGE refused: the picture is not rebuilt from the stream after a restart", "fix", remedy(err, "+xrange"), "err", err)
	}
	settle(out)
	// Recreate the group after what was replayed. Only this replica reads
	// it (claimPresence), so destroying it loses nothing.
	if !keepGroup {
		if existed {
			if err := c.rdb.XGroupDestroy(ctx, c.opt.Stream, c.opt.Group).Err(); err != nil {
				return err
			}
		}
		create := []any{"XGROUP", "CREATE", c.opt.Stream, c.opt.Group, end, "MKSTREAM"}
		if si != nil && si.hasCounters && end == si.lastGenerated {
			// Lag and gap detection need the group's read counter.
			create = append(create, "ENTRIESREAD", si.entriesAdded)
		}
		if err := c.rdb.Do(ctx, create...).Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			return err
		}
	}
	c.groupGen.Add(1)
	c.mu.Lock()
	if end != "0" {
		c.lastApplied = end
	}
	c.mu.Unlock()
	var countedBefore time.Time // when the previous incarnation stopped counting
	if id, ok := parseID(counted); ok && counted != "" {
		countedBefore = time.UnixMilli(int64(id.ms))
	}
	if existed && !stoppedAt.IsZero() && stoppedAt.After(countedBefore) {
		countedBefore = stoppedAt
	}
	c.agg.EndReplay(countedBefore)
	c.log.Info("rebuilt the picture from Redis", "from", start.UTC().Format(time.RFC3339), "to_entry", end,
		"entries", entries, "checkpoint_holders", restored, "checkpoint_expirations", restoredExps, "restarted", existed, "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

// reportTrimmedWhileDown counts the entries trimmed from the stream after the
// previous incarnation's last read and before any replica read them.
func (c *Follower) reportTrimmedWhileDown(si *streamInfo, g groupInfo) {
	if si == nil || !si.hasCounters || !g.entriesReadValid || g.lastDelivered == si.lastGenerated ||
		si.firstID != "" && !idLess(g.lastDelivered, si.firstID) {
		return
	}
	if missing := si.entriesAdded - si.length - g.entriesRead; missing > 0 {
		c.agg.StreamGap(missing)
		c.log.Warn("stream trimmed past entries the group had not read: events lost (keep more: the emitters' MaxAge, 15 minutes by default; or add collector capacity)",
			"missing", missing, "last_delivered", g.lastDelivered, "first_entry", si.firstID)
	}
}

func (c *Follower) serverTime(ctx context.Context) (time.Time, error) {
	now, err := c.rdb.Time(ctx).Result()
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return time.Now(), nil // TIME refused: the local clock is close enough
	}
	return now, err
}

// replayRange hands the entries in (start, end] to the applier as replay
// batches; those up to counted are muted. It returns the entries read.
func (c *Follower) replayRange(ctx context.Context, out chan<- batch, start time.Time, end, counted string) (int, error) {
	if end == "0" || end == "" {
		return 0, nil
	}
	from := strconv.FormatInt(max(start.UnixMilli(), 0), 10)
	n := 0
	for {
		msgs, err := c.rdb.XRangeN(ctx, c.opt.Stream, from, end, int64(c.opt.Count)).Result()
		if err != nil {
			return n, err
		}
		if len(msgs) == 0 {
			return n, nil
		}
		n += len(msgs)
		// Split at counted: entries up to it are muted.
		i := 0
		if counted != "" {
			for i < len(msgs) && !idLess(counted, msgs[i].ID) {
				i++
			}
		}
		if i > 0 {
			out <- batch{msgs: msgs[:i], replay: true}
		}
		if i < len(msgs) {
			out <- batch{msgs: msgs[i:], replay: true, count: true}
		}
		last := msgs[len(msgs)-1].ID
		if last == end || len(msgs) < c.opt.Count {
			return n, nil
		}
		from = "(" + last
	}
}

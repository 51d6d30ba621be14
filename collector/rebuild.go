package collector

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
	"github.com/redis/go-redis/v9"
)

// Replicas and restarts.
//
// Every replica reads the whole stream through a consumer group of its own,
// ReplicaGroupPrefix + its replica name, so any number of replicas show the
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

// ReplicaGroupPrefix starts the name of every replica's own consumer group.
const ReplicaGroupPrefix = "lockscope:replica:"

// Checkpoint tuning.
const (
	checkpointEvery  = 5 * time.Second
	checkpointMinAge = 30 * time.Second // younger holders are in the replayed stream
	checkpointMax    = 100_000          // holders kept (the oldest first)
	checkpointTTL    = 24 * time.Hour
	restoreBatch     = 1000 // lock keys checked per pipeline
)

// CheckpointKey is where replicas of stream keep their checkpoint.
func CheckpointKey(stream string) string { return stream + ":checkpoint" }

// isReplayed reports whether the rebuild at start is done (always, with a
// shared group).
func (c *Collector) isReplayed() bool {
	select {
	case <-c.replayed:
		return true
	default:
		return false
	}
}

// errDuplicateReplica reports a second process reading as the same replica.
var errDuplicateReplica = errors.New("collector: another process is reading as this replica")

// rebuild restores the state at start (see above) and leaves the replica's
// group positioned after the replayed entries.
func (c *Collector) rebuild(ctx context.Context, out chan<- batch) error {
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
	restored := 0
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
		"entries", entries, "checkpoint_holders", restored, "restarted", existed, "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

// reportTrimmedWhileDown counts the entries trimmed from the stream after the
// previous incarnation's last read and before any replica read them.
func (c *Collector) reportTrimmedWhileDown(si *streamInfo, g groupInfo) {
	if si == nil || !si.hasCounters || !g.entriesReadValid || g.lastDelivered == si.lastGenerated ||
		si.firstID != "" && !idLess(g.lastDelivered, si.firstID) {
		return
	}
	if missing := si.entriesAdded - si.length - g.entriesRead; missing > 0 {
		c.agg.StreamGap(missing)
		c.log.Warn("stream trimmed past entries the group had not read: events lost (raise the emitters' MAXLEN or add collector capacity)",
			"missing", missing, "last_delivered", g.lastDelivered, "first_entry", si.firstID)
	}
}

// Presence: a live replica keeps PresenceKey(stream, replica) set to its own
// random id and the time, refreshed every presenceEvery. A process starting as
// a replica whose key was refreshed by another process within presenceStale
// waits for it to go stale (a killed predecessor stops refreshing); if it
// stays fresh, the second process refuses to read. The time of the last
// refresh is also when the previous incarnation stopped counting.
const (
	presenceEvery = 500 * time.Millisecond
	presenceStale = 2 * time.Second
	presenceTTL   = time.Hour
)

// presenceStopped replaces the id of a replica that stopped gracefully.
const presenceStopped = "stopped"

// PresenceKey is the key a live replica of stream keeps fresh.
func PresenceKey(stream, replica string) string { return stream + ":replica:" + replica }

func (c *Collector) presenceValue() string {
	return c.instance + "|" + strconv.FormatInt(time.Now().UnixMilli(), 10)
}

func parsePresence(v string) (instance string, at time.Time, ok bool) {
	instance, ms, found := strings.Cut(v, "|")
	n, err := strconv.ParseInt(ms, 10, 64)
	return instance, time.UnixMilli(n), found && err == nil
}

// claimPresence takes the replica's presence key, waiting out a dead
// predecessor's; it returns when the predecessor was last alive (zero if
// unknown).
func (c *Collector) claimPresence(ctx context.Context) (time.Time, error) {
	key := PresenceKey(c.opt.Stream, c.opt.Replica)
	give := time.Now().Add(presenceStale + presenceEvery)
	for {
		v, err := c.rdb.Get(ctx, key).Result()
		var rerr redis.Error
		switch {
		case errors.As(err, &rerr) && !errors.Is(err, redis.Nil):
			c.log.Warn("cannot keep the replica's presence key: two processes started as the same replica would go unnoticed", "key", key, "fix", remedy(err, "+get +set on it"), "err", err)
			return time.Time{}, nil
		case err != nil && !errors.Is(err, redis.Nil):
			return time.Time{}, err
		}
		inst, at, ok := parsePresence(v)
		if !ok || inst == c.instance || inst == presenceStopped || time.Since(at) >= presenceStale {
			if err := c.rdb.Set(ctx, key, c.presenceValue(), presenceTTL).Err(); err != nil {
				return time.Time{}, err
			}
			if !ok {
				at = time.Time{}
			}
			return at, nil
		}
		if time.Now().After(give) {
			c.log.Error("another lockscope process is reading the stream as the same replica; each would see part of the events. Give every replica its own --replica name (default: hostname and listen port)",
				"replica", c.opt.Replica, "group", c.opt.Group)
			return time.Time{}, fmt.Errorf("%w %q (group %q)", errDuplicateReplica, c.opt.Replica, c.opt.Group)
		}
		if !sleep(ctx, presenceEvery/2) {
			return time.Time{}, ctx.Err()
		}
	}
}

// keepPresence refreshes the presence key until ctx ends, and once more on
// the way out (the time a graceful stop stopped counting).
func (c *Collector) keepPresence(ctx context.Context) {
	key := PresenceKey(c.opt.Stream, c.opt.Replica)
	warned := false
	refresh := func(ctx context.Context) {
		old, err := c.rdb.SetArgs(ctx, key, c.presenceValue(), redis.SetArgs{TTL: presenceTTL, Get: true}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return
		}
		if inst, _, ok := parsePresence(old); ok && inst != c.instance && !warned {
			warned = true
			c.log.Error("another lockscope process reads the stream as the same replica: each shows part of the events. Give every replica its own --replica name",
				"replica", c.opt.Replica)
		}
	}
	every(ctx, presenceEvery, func() { refresh(ctx) })
	// Stopped: the next start need not wait.
	dctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.rdb.Set(dctx, key, presenceStopped+"|"+strconv.FormatInt(time.Now().UnixMilli(), 10), presenceTTL)
}

func (c *Collector) serverTime(ctx context.Context) (time.Time, error) {
	now, err := c.rdb.Time(ctx).Result()
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return time.Now(), nil // TIME refused: the local clock is close enough
	}
	return now, err
}

// replayRange hands the entries in (start, end] to the applier as replay
// batches; those up to counted are muted. It returns the entries read.
func (c *Collector) replayRange(ctx context.Context, out chan<- batch, start time.Time, end, counted string) (int, error) {
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

// checkpoint is what readCheckpoint found.
type checkpoint struct {
	at      time.Time
	holders []event.Event
}

// writeCheckpoints keeps the checkpoint fresh until ctx ends.
func (c *Collector) writeCheckpoints(ctx context.Context) {
	failed := false
	every(ctx, c.ckptEvery, func() {
		if c.agg.Health() != nil {
			return
		}
		err := c.writeCheckpoint(ctx)
		switch {
		case err != nil && !failed:
			c.log.Warn("could not write the checkpoint: a restarted replica will miss holders older than its replayed stream", "key", CheckpointKey(c.opt.Stream), "fix", remedy(err, "+set on the checkpoint key"), "err", err)
			failed = true
		case err == nil && failed:
			c.log.Info("writing the checkpoint again")
			failed = false
		}
	})
}

// writeCheckpoint stores the holders older than checkpointMinAge in one
// string value (one SET: no DEL needed, nothing half-written):
//
//	lsck1|<unix ms>|{<uvarint n><uvarint len><packed batch of n events>}...
//
// with batches of at most event.MaxBatchEvents events.
func (c *Collector) writeCheckpoint(ctx context.Context) error {
	now := c.opt.Now()
	hs := c.agg.Holders(now.Add(-c.ckptMinAge), checkpointMax)
	if n := c.opt.Partitions; n > 1 {
		// Only this partition's keys: the others checkpoint their own.
		hs = slices.DeleteFunc(hs, func(e event.Event) bool { return event.PartitionOf(e.Key, n) != c.opt.Partition })
	}
	b := []byte(checkpointMagic + strconv.FormatInt(now.UnixMilli(), 10) + "|")
	for len(hs) > 0 {
		part := hs[:min(len(hs), event.MaxBatchEvents)]
		hs = hs[len(part):]
		packed := event.Pack(part)
		b = binary.AppendUvarint(b, uint64(len(part)))
		b = binary.AppendUvarint(b, uint64(len(packed)))
		b = append(b, packed...)
	}
	return c.rdb.Set(ctx, CheckpointKey(c.opt.Stream), b, checkpointTTL).Err()
}

const checkpointMagic = "lsck1|"

// readCheckpoint returns the checkpoint, or nil when there is none.
func (c *Collector) readCheckpoint(ctx context.Context) (*checkpoint, error) {
	s, err := c.rdb.Get(ctx, CheckpointKey(c.opt.Stream)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseCheckpoint(s)
}

func parseCheckpoint(s string) (*checkpoint, error) {
	rest, ok := strings.CutPrefix(s, checkpointMagic)
	if !ok {
		return nil, errors.New("checkpoint: unknown format")
	}
	at, rest, ok := strings.Cut(rest, "|")
	atMS, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil {
		return nil, errors.New("checkpoint malformed: time")
	}
	ck := &checkpoint{at: time.UnixMilli(atMS)}
	for len(rest) > 0 {
		n, k := binary.Uvarint([]byte(rest[:min(len(rest), binary.MaxVarintLen64)]))
		if k <= 0 {
			return nil, errors.New("checkpoint malformed: count")
		}
		rest = rest[k:]
		l, k := binary.Uvarint([]byte(rest[:min(len(rest), binary.MaxVarintLen64)]))
		if k <= 0 || l > uint64(len(rest)-k) || n > event.MaxBatchEvents || len(ck.holders)+int(n) > checkpointMax {
			return nil, errors.New("checkpoint malformed: length")
		}
		rest = rest[k:]
		if ck.holders, err = event.DecodeBatch(ck.holders, rest[:l], int(n)); err != nil {
			return nil, fmt.Errorf("checkpoint malformed: %w", err)
		}
		rest = rest[l:]
	}
	return ck, nil
}

// verifyHolders checks the checkpoint's holders that began before start
// against their keys now and returns the acquisitions to replay: a key gone
// is dropped; a value written by the library gives the true holder; a
// foreign value counts when it is still the value the holder was seen with.
func (c *Collector) verifyHolders(ctx context.Context, hs []event.Event, start int64, now time.Time) ([]event.Event, error) {
	var out []event.Event
	for len(hs) > 0 {
		part := hs[:min(len(hs), restoreBatch)]
		hs = hs[len(part):]
		pipe := c.rdb.Pipeline()
		gets := make([]*redis.StringCmd, len(part))
		pttls := make([]*redis.DurationCmd, len(part))
		for i := range part {
			gets[i] = pipe.Get(ctx, part[i].Key)
			pttls[i] = pipe.PTTL(ctx, part[i].Key)
		}
		_, _ = pipe.Exec(ctx)
		for i := range part {
			h := part[i]
			value, err := gets[i].Result()
			if errors.Is(err, redis.Nil) || redis.HasErrorPrefix(err, "WRONGTYPE") {
				continue
			}
			if err != nil {
				return nil, err
			}
			pttl, err := pttls[i].Result()
			if err != nil {
				return nil, err
			}
			if v, err := lock.ParseValue(value); err == nil {
				h.Owner, h.Lease, h.Fence, h.TS, h.Passive = v.Owner, v.Lease, v.Fence, v.Since.UnixNano(), false
			} else if !h.Passive || lock.ForeignOwner(value) != h.Owner {
				continue
			}
			if h.TS >= start || h.TS <= 0 {
				continue // in the replayed stream
			}
			h.TTL = 0
			if pttl > 0 {
				h.TTL = now.Add(pttl).Sub(time.Unix(0, h.TS))
			}
			out = append(out, h)
		}
	}
	return out, nil
}

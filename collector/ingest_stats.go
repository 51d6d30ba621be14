package collector

import (
	"context"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// This file watches the stream from the outside: consumer lag, pending
// entries, and entries trimmed (the emitters trim by age or length) before the group read them.
//
// Gap detection rests on counters Redis 7.0+ keeps. entries-added (A) counts
// every entry ever added to the stream, length (N) those still in it, and the
// group's entries-read (R) those it was delivered. While the group's last
// delivered ID lies before the first entry still in the stream, the A-N
// entries that were trimmed include R delivered ones; the rest were never
// read. When the group has read everything, A-R is what it never saw.
// Redis 7.0 keeps counting trimmed entries as lag forever after, later
// versions repair R when the group reads past a gap; the tracker keeps the
// deficit (off) it knows R to have, so both report each gap once and the lag
// exported excludes entries that no longer exist. A gap that opens and is read
// past between two polls (every second) is caught on 7.0 by the caught-up
// check; on versions that repair R it can go unreported.

type streamInfo struct {
	length        int64
	entriesAdded  int64
	hasCounters   bool // entries-added present: Redis >= 7.0 (not miniredis)
	lastGenerated string
	firstID       string // "" when the stream is empty
	unknown       bool   // XINFO was refused: nothing above is known
}

type groupInfo struct {
	pending          int64
	lastDelivered    string
	entriesRead      int64
	entriesReadValid bool
	lag              int64
	lagValid         bool
}

type gapTracker struct {
	mu  sync.Mutex // held across the XINFO round trip so updates see snapshots in order
	gen uint64
	off int64 // entries the group's entries-read is known to be short by
	lag int64 // last lag reported

	last   string // the stream's last entry at the last poll
	rebase bool   // the stream lost writes: the next update takes its deficit as known (failover.go)
	backAt string // the last applied entry a loss was reported for (failover.go)
}

// inspect reads the stream's and groups' state, reports lag, pending and any
// gap for this collector's group, and returns what it read (si is nil when the
// stream does not exist).
func (c *Follower) inspect(ctx context.Context) (*streamInfo, map[string]groupInfo, error) {
	c.gaps.mu.Lock()
	defer c.gaps.mu.Unlock()
	prev := c.fresh.Load()
	var read int64
	if prev != nil {
		read = prev.n.Load() // before XINFO: each was delivered before it (failover.go)
	}
	si, groups, err := c.streamInfo(ctx)
	if err != nil {
		return nil, nil, err
	}
	g, ok := groups[c.opt.Group]
	if !ok || si == nil || !c.isReplayed() {
		// Before the rebuild, the group is the previous incarnation's:
		// rebuild reports what it missed.
		return si, groups, nil
	}
	if err := c.checkLostWrites(ctx, si, g); err != nil {
		return nil, nil, err
	}
	c.checkReadTooMuch(prev, read, si, g)
	c.gaps.last = si.lastGenerated
	missing, lag := c.gaps.update(c.groupGen.Load(), si, g)
	if missing > 0 {
		c.agg.StreamGap(missing)
		c.log.Warn("stream trimmed past entries the group had not read: events lost (keep more: the emitters' MaxAge, 15 minutes by default; or add collector capacity)",
			"missing", missing, "last_delivered", g.lastDelivered, "first_entry", si.firstID)
	}
	c.agg.SetPartitionStreamStats(c.opt.Partition, lag, g.pending)
	return si, groups, nil
}

// update is called with gaps.mu held.
func (t *gapTracker) update(gen uint64, s *streamInfo, g groupInfo) (missing, lag int64) {
	if gen != t.gen {
		t.gen, t.off = gen, 0
	}
	caughtUp := g.lastDelivered == s.lastGenerated
	if !s.hasCounters || !g.entriesReadValid {
		switch {
		case caughtUp:
			t.lag = 0
		case g.lagValid && s.hasCounters:
			t.lag = max(g.lag-t.off, 0)
		}
		return 0, t.lag
	}
	behindFirst := !caughtUp && (s.firstID == "" || idLess(g.lastDelivered, s.firstID))
	if t.rebase {
		t.rebase = false
		switch {
		case caughtUp:
			t.off = max(s.entriesAdded-g.entriesRead, 0)
		case behindFirst:
			t.off = max(s.entriesAdded-s.length-g.entriesRead, 0)
		default:
			t.off = 0
		}
	}
	switch {
	case caughtUp:
		deficit := s.entriesAdded - g.entriesRead
		if deficit > t.off {
			missing = deficit - t.off
		}
		t.off = max(deficit, 0)
		t.lag = 0
	case behindFirst:
		deficit := s.entriesAdded - s.length - g.entriesRead
		if deficit > t.off {
			missing = deficit - t.off
			t.off = deficit
		}
		t.lag = s.length
	case g.lagValid:
		if g.lag < t.off {
			// Only a Redis that repairs entries-read after a gap reports
			// less lag than the deficit 7.0 would carry.
			t.off = 0
		}
		t.lag = g.lag - t.off
	}
	return missing, t.lag
}

// streamInfo reads XINFO STREAM and XINFO GROUPS in one round trip. The raw
// replies are parsed here because go-redis maps a null entries-read to 0,
// which would make every group created mid-stream look like a gap.
func (c *Follower) streamInfo(ctx context.Context) (*streamInfo, map[string]groupInfo, error) {
	pipe := c.rdb.Pipeline()
	sCmd := pipe.Do(ctx, "XINFO", "STREAM", c.opt.Stream)
	gCmd := pipe.Do(ctx, "XINFO", "GROUPS", c.opt.Stream)
	_, _ = pipe.Exec(ctx)
	sv, err := sCmd.Result()
	if err != nil {
		if redis.HasErrorPrefix(err, "ERR no such key") || redis.HasErrorPrefix(err, "no such key") {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	gv, err := gCmd.Result()
	if err != nil {
		return nil, nil, err
	}
	f := fields(sv)
	si := &streamInfo{}
	si.length, _ = asInt(f["length"])
	si.entriesAdded, si.hasCounters = asInt(f["entries-added"])
	si.lastGenerated, _ = asString(f["last-generated-id"])
	if si.length > 0 {
		if id, ok := asString(f["recorded-first-entry-id"]); ok && id != "0-0" {
			si.firstID = id
		} else if e, ok := f["first-entry"].([]any); ok && len(e) > 0 {
			si.firstID, _ = asString(e[0])
		}
	}
	groups := make(map[string]groupInfo)
	list, _ := gv.([]any)
	for _, item := range list {
		gf := fields(item)
		name, _ := asString(gf["name"])
		var g groupInfo
		g.pending, _ = asInt(gf["pending"])
		g.lastDelivered, _ = asString(gf["last-delivered-id"])
		g.entriesRead, g.entriesReadValid = asInt(gf["entries-read"])
		g.lag, g.lagValid = asInt(gf["lag"])
		groups[name] = g
	}
	return si, groups, nil
}

// fields turns a RESP3 map or a RESP2 flat list of pairs into a map.
func fields(v any) map[string]any {
	out := make(map[string]any)
	switch m := v.(type) {
	case map[any]any:
		for k, val := range m {
			if ks, ok := k.(string); ok {
				out[ks] = val
			}
		}
	case map[string]any:
		return m
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			if ks, ok := m[i].(string); ok {
				out[ks] = m[i+1]
			}
		}
	}
	return out
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

func asString(v any) (string, bool) {
	s, ok := v.(string)
	return s, ok
}

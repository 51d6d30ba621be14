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

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
	"github.com/redis/go-redis/v9"
)

// The checkpoint: every live replica keeps, in CheckpointKey, the holders
// older than the stream window a restarted replica replays, so that it
// knows holders whose acquisition the stream no longer holds (see
// rebuild.go), and the recent expirations older than that window, so that
// it lists and counts the expirations the others do.

// Checkpoint tuning.
const (
	checkpointEvery  = 5 * time.Second
	checkpointMinAge = 30 * time.Second // younger holders are in the replayed stream
	checkpointMax    = 100_000          // holders kept (the oldest first)
	checkpointBytes  = 16 << 20         // and at most this many bytes of their keys, owners and leases
	checkpointExps   = 256              // expirations kept (the state keeps as many)
	checkpointTTL    = 24 * time.Hour
	restoreBatch     = 1000 // lock keys checked per pipeline
)

// checkpoint is what readCheckpoint found.
type checkpoint struct {
	at          time.Time
	holders     []event.Event // acquired events
	expirations []event.Event // expired events, oldest first (Reason "confirmed": Expiration.Confirmed)
}

// confirmedReason marks a checkpointed expiration that a keyspace
// notification confirmed.
const confirmedReason = "confirmed"

// workingReason marks, beside it (comma-separated), a checkpointed
// expiration under a holder still at work (Expiration.HolderWorking): a
// restarted replica shows the "still working" mark the others show.
const workingReason = "working"

// writeCheckpoints keeps the checkpoint fresh until ctx ends.
func (c *Follower) writeCheckpoints(ctx context.Context) {
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

// writeCheckpoint stores the holders older than checkpointMinAge, as
// acquired events, and the recent expirations as old, as expired events,
// in one string value (one SET: no DEL needed, nothing half-written):
//
//	lsck1|<unix ms>|{<uvarint n><uvarint len><packed batch of n events>}...
//
// with batches of at most event.MaxBatchEvents events. With partitions,
// the first partition's checkpoint keeps the expirations (the state lists
// them all together).
func (c *Follower) writeCheckpoint(ctx context.Context) error {
	now := c.opt.Now()
	hs := c.agg.Holders(now.Add(-c.ckptMinAge), checkpointMax)
	if n := c.opt.Partitions; n > 1 {
		// Only this partition's holders: the others checkpoint their own.
		// Passive holds travel in the first partition, whatever their key.
		hs = slices.DeleteFunc(hs, func(e event.Event) bool {
			p := event.PartitionOf(e.Key, n)
			if e.Passive {
				p = 0
			}
			return p != c.opt.Partition
		})
	}
	// 100 000 holders of 100-byte strings take 10 MB; a hostile stream's,
	// each string at the state's limit, would take ten times that, every
	// checkpointEvery.
	size := 0
	for i, e := range hs {
		if size += len(e.Key) + len(e.Owner) + len(e.Lease); size > checkpointBytes {
			hs = hs[:i]
			break
		}
	}
	if c.opt.Partition == 0 {
		for _, x := range c.agg.ExpirationsBefore(now.Add(-c.ckptMinAge)) {
			e := event.Event{Type: event.Expired, Key: x.Key, Owner: x.Owner, Lease: x.Lease, TS: x.At.UnixNano(), Hold: x.Held,
				Passive: x.Passive}
			if x.Confirmed {
				e.Reason = confirmedReason
			}
			if x.HolderWorking {
				e.Reason = strings.TrimPrefix(e.Reason+","+workingReason, ",")
			}
			hs = append(hs, e)
		}
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
func (c *Follower) readCheckpoint(ctx context.Context) (*checkpoint, error) {
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
	var evs []event.Event
	for len(rest) > 0 {
		n, k := binary.Uvarint([]byte(rest[:min(len(rest), binary.MaxVarintLen64)]))
		if k <= 0 {
			return nil, errors.New("checkpoint malformed: count")
		}
		rest = rest[k:]
		l, k := binary.Uvarint([]byte(rest[:min(len(rest), binary.MaxVarintLen64)]))
		if k <= 0 || l > uint64(len(rest)-k) || n > event.MaxBatchEvents || len(evs)+int(n) > checkpointMax+checkpointExps {
			return nil, errors.New("checkpoint malformed: length")
		}
		rest = rest[k:]
		if evs, err = event.DecodeBatch(evs, rest[:l], int(n)); err != nil {
			return nil, fmt.Errorf("checkpoint malformed: %w", err)
		}
		rest = rest[l:]
	}
	for _, e := range evs {
		if e.Type == event.Expired {
			ck.expirations = append(ck.expirations, e)
		} else {
			ck.holders = append(ck.holders, e)
		}
	}
	if len(ck.holders) > checkpointMax || len(ck.expirations) > checkpointExps {
		return nil, errors.New("checkpoint malformed: too many entries")
	}
	return ck, nil
}

// verifyHolders checks the checkpoint's holders that began before start
// against their keys now and returns the acquisitions to replay: a key gone
// is dropped; a value written by the library gives the true holder; a
// foreign value counts when it is still the value the holder was seen with.
func (c *Follower) verifyHolders(ctx context.Context, hs []event.Event, start int64, now time.Time) ([]event.Event, error) {
	var out []event.Event
	for len(hs) > 0 {
		part := hs[:min(len(hs), restoreBatch)]
		hs = hs[len(part):]
		keys := make([]string, len(part))
		for i := range part {
			keys[i] = part[i].Key
		}
		rs := readKeys(ctx, c.rdb, keys)
		for i := range part {
			h, r := part[i], &rs[i]
			if r.failed != nil {
				return nil, r.failed
			}
			if r.gone {
				continue
			}
			if v, err := lock.ParseValue(r.value); err == nil && !r.hash {
				h.Owner, h.Lease, h.Fence, h.TS, h.Passive = v.Owner, v.Lease, v.Fence, v.Since.UnixNano(), false
			} else if !h.Passive || !sameHolder(h.Owner, r) {
				continue
			} else {
				h.Owner = r.owner() // as the watcher names it now
			}
			if h.TS >= start || h.TS <= 0 {
				continue // in the replayed stream
			}
			h.TTL = 0
			if r.pttl > 0 {
				h.TTL = now.Add(r.pttl).Sub(time.Unix(0, h.TS))
			}
			out = append(out, h)
		}
	}
	return out, nil
}

// restoreExpirations gives the state the checkpoint's expirations older
// than start, where the replayed stream begins (the younger ones it
// replays).
func (c *Follower) restoreExpirations(ck *checkpoint, start time.Time) int {
	var exps []state.Expiration
	for _, e := range ck.expirations {
		if e.TS < start.UnixNano() {
			marks := strings.Split(e.Reason, ",")
			exps = append(exps, state.Expiration{Key: e.Key, Owner: e.Owner, Lease: e.Lease, At: time.Unix(0, e.TS),
				Held: e.Hold, Confirmed: slices.Contains(marks, confirmedReason), HolderWorking: slices.Contains(marks, workingReason),
				Passive: e.Passive})
		}
	}
	c.agg.RestoreExpirations(exps)
	return len(exps)
}

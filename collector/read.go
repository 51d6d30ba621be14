package collector

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
)

// Reads of the stream bounded in bytes. Redis has no byte limit on a read:
// XREADGROUP COUNT 64 brings 64 entries of whatever size their writer chose
// (up to proto-max-bulk-len, 512 MB, each), and sizing the next read from
// the last one's entries (count, sized) cannot foresee a writer who sends
// small entries and then, while serve lags behind, large ones. readScript
// takes entries one at a time inside Redis until readBudget is spent, so a
// read brings at most readBudget and one decodable entry more; an entry
// larger than any that decodes is replaced by a stub and counted as
// malformed, never sent.

//go:embed entry.lua
var entryLua string

//go:embed read.lua
var readLua string

var readScript = redis.NewScript(entryLua + readLua)

// oversizeField is the one field of the stub readScript returns in place of
// an entry larger than maxEntryBytes: its size in bytes.
const oversizeField = "lockscope-oversize"

// maxEntryBytes is the largest entry that may decode: a batch and an
// extension of event.MaxBatchBytes each and small fields beside them.
const maxEntryBytes = 2*event.MaxBatchBytes + 64<<10

// errOversize wraps event.ErrTooLarge for a stub of readScript.
func errOversize(size string) error {
	return fmt.Errorf("%w: entry of %s bytes (an entry decodes up to %d), not read", event.ErrTooLarge, size, maxEntryBytes)
}

// readGroup reads, through the group, up to most entries after start (">":
// entries never delivered; an ID: this consumer's pending entries after
// it). With the script it never blocks and brings at most readBudget bytes
// and one entry; a collector whose Redis user may not run scripts reads
// with XREADGROUP, blocking up to Options.Block for new entries, and says
// once in its log that its reads are bounded by count only.
func (c *Follower) readGroup(ctx context.Context, start string, most int) (msgs []redis.XMessage, scripted bool, err error) {
	if !c.noScript.Load() {
		msgs, err := c.readScripted(ctx, start, most)
		if !c.scriptRefused(err) {
			return msgs, true, err
		}
	}
	block := time.Duration(-1)
	if start == ">" {
		block = c.opt.Block
	}
	msgs, err = c.xreadGroup(ctx, start, most, block)
	return msgs, false, err
}

// scriptRefused reports whether err says that this Redis user may not run
// the read and claim scripts (no EVALSHA, or no scripting at all); then it
// sets noScript, so reads and claims fall back to commands sized by count,
// and says so in the log once.
func (c *Follower) scriptRefused(err error) bool {
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) || !(redis.HasErrorPrefix(err, "NOPERM") || redis.HasErrorPrefix(err, "ERR unknown command")) {
		return false
	}
	if !c.noScript.Swap(true) {
		c.log.Warn("EVALSHA refused: stream reads and claims are sized by the previous read's entries only, so a writer of the stream who sends large entries after small ones can make one read bring up to Count of them",
			"fix", remedy(err, "+evalsha +eval"), "err", err)
	}
	return true
}

// xreadGroup is one XREADGROUP (block < 0: without BLOCK).
func (c *Follower) xreadGroup(ctx context.Context, start string, most int, block time.Duration) ([]redis.XMessage, error) {
	streams, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group:    c.opt.Group,
		Consumer: c.opt.Consumer,
		Streams:  []string{c.opt.Stream, start},
		Count:    int64(most),
		Block:    block,
	}).Result()
	if err != nil {
		return nil, err
	}
	var msgs []redis.XMessage
	for _, s := range streams {
		msgs = append(msgs, s.Messages...)
	}
	return msgs, nil
}

//go:embed claim.lua
var claimLua string

var claimScript = redis.NewScript(entryLua + claimLua)

// claimGroup claims, from start (a cursor in the group's pending list), up
// to most entries that other consumers left pending for ClaimMinIdle, and
// returns them, the next cursor ("0-0": the list was scanned to its end) and
// how many entries were trimmed while pending. With the script it brings
// at most readBudget bytes and one entry, an oversize entry as its stub, as
// readGroup does; without it, XAUTOCLAIM sized by the previous read
// (count: most is the script's bound, which the previous read may not
// have fitted).
func (c *Follower) claimGroup(ctx context.Context, start string, most int) (msgs []redis.XMessage, next string, deleted int, err error) {
	if !c.noScript.Load() {
		msgs, next, deleted, err := c.claimScripted(ctx, start, most)
		if !c.scriptRefused(err) {
			return msgs, next, deleted, err
		}
	}
	msgs, next, ids, err := c.rdb.XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{
		Stream:   c.opt.Stream,
		Group:    c.opt.Group,
		Consumer: c.opt.Consumer,
		MinIdle:  c.opt.ClaimMinIdle,
		Start:    start,
		Count:    int64(c.count()),
	}).Result()
	return msgs, next, len(ids), err
}

// claimScripted runs claimScript and parses its answer: {next, entries as
// readScript's, trimmed}.
func (c *Follower) claimScripted(ctx context.Context, start string, most int) ([]redis.XMessage, string, int, error) {
	v, err := claimScript.Run(ctx, c.rdb, []string{c.opt.Stream},
		c.opt.Group, c.opt.Consumer, c.opt.ClaimMinIdle.Milliseconds(), start, most, readBudget, maxEntryBytes).Result()
	if err != nil {
		return nil, "", 0, err
	}
	parts, ok := v.([]any)
	if !ok || len(parts) != 3 {
		return nil, "", 0, fmt.Errorf("collector: stream claim script answered %T", v)
	}
	next, ok := parts[0].(string)
	if !ok {
		return nil, "", 0, fmt.Errorf("collector: stream claim script answered a cursor of %T", parts[0])
	}
	deleted, ok := parts[2].(int64)
	if !ok {
		return nil, "", 0, fmt.Errorf("collector: stream claim script answered a count of %T", parts[2])
	}
	msgs, err := scriptMessages(parts[1])
	return msgs, next, int(deleted), err
}

// readCount is how many entries the next read of the group asks for: Count
// when the script bounds it in bytes, else as many as readBudget holds at
// the size of the previous read's largest entry (count).
func (c *Follower) readCount() int {
	if c.noScript.Load() {
		return c.count()
	}
	return c.opt.Count
}

// readScripted runs readScript and turns its answer into messages as
// XREADGROUP's would be.
func (c *Follower) readScripted(ctx context.Context, start string, most int) ([]redis.XMessage, error) {
	v, err := readScript.Run(ctx, c.rdb, []string{c.opt.Stream},
		c.opt.Group, c.opt.Consumer, start, most, readBudget, maxEntryBytes).Result()
	if err != nil {
		return nil, err
	}
	return scriptMessages(v)
}

// scriptMessages parses readScript's answer: an array of {id, {field,
// value, …}} or {id} (trimmed while pending).
func scriptMessages(v any) ([]redis.XMessage, error) {
	entries, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("collector: stream read script answered %T", v)
	}
	msgs := make([]redis.XMessage, 0, len(entries))
	for _, e := range entries {
		parts, ok := e.([]any)
		if !ok || len(parts) == 0 {
			return nil, fmt.Errorf("collector: stream read script answered an entry of %T", e)
		}
		id, ok := parts[0].(string)
		if !ok {
			return nil, fmt.Errorf("collector: stream read script answered an ID of %T", parts[0])
		}
		m := redis.XMessage{ID: id}
		if len(parts) > 1 {
			fields, ok := parts[1].([]any)
			if !ok || len(fields)%2 != 0 {
				return nil, fmt.Errorf("collector: stream read script answered entry %s's fields as %T", id, parts[1])
			}
			m.Values = make(map[string]any, len(fields)/2)
			for i := 0; i < len(fields); i += 2 {
				k, _ := fields[i].(string)
				m.Values[k] = fields[i+1]
			}
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// entryBytes is about how many bytes m took in the read: its ID, field
// names and values.
func entryBytes(m redis.XMessage) int {
	n := len(m.ID)
	for k, v := range m.Values {
		n += len(k)
		if s, ok := v.(string); ok {
			n += len(s)
		}
	}
	return n
}

// readBytes is about how many bytes a read of msgs brought.
func readBytes(msgs []redis.XMessage) int {
	n := 0
	for _, m := range msgs {
		n += entryBytes(m)
	}
	return n
}

// oversized reports whether m is readScript's stub for an entry too large
// to decode, and its size.
func oversized(m redis.XMessage) (string, bool) {
	if len(m.Values) != 1 {
		return "", false
	}
	v, ok := m.Values[oversizeField]
	if !ok {
		return "", false
	}
	s, _ := v.(string)
	if _, err := strconv.Atoi(s); err != nil {
		return "", false
	}
	return s, true
}

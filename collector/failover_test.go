package collector

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestLostWritesAfterTheGroupMovedOn: the poll after a failover may come
// when the group has already read on at the new primary (a read the client
// retried there by itself, and new entries). Since the previous poll the
// collector read more new entries than the stream says were added: Redis
// lost writes, and the collector says so once, whether it has applied the
// new read or not. A failover the group did not read past yet is said once
// too, by the older test (its group delivered less than it applied). A
// stream that grew, was trimmed or had an entry deleted says nothing.
func TestLostWritesAfterTheGroupMovedOn(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	const said = "Redis lost writes"

	type env struct {
		t      *testing.T
		stream string
		old    []string // the entries before the first poll
		read   func(apply bool) string
		readN  func(n int64) // reads n new entries, applied
	}
	add := func(e env, id string) string {
		e.t.Helper()
		if id == "" {
			id = "*"
		}
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.stream, ID: id, Values: []any{"b", "B"}}).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		return id
	}
	// failover makes the stream the new primary's: the entries before the
	// first poll, not A, and the group as far as them.
	failover := func(e env, a string) {
		rdb.Del(ctx, e.stream)
		for _, id := range e.old {
			add(e, id)
		}
		// As a replica has it: the group's reads replicate with their
		// count (Redis 7).
		if err := rdb.Do(ctx, "XGROUP", "CREATE", e.stream, DefaultGroup, e.old[len(e.old)-1], "ENTRIESREAD", len(e.old)).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
	after := func(id string) string { // an ID after id, as the new primary's clock gives
		ms, _ := strconv.ParseInt(strings.Split(id, "-")[0], 10, 64)
		return strconv.FormatInt(ms+1, 10) + "-0"
	}
	for _, tc := range []struct {
		name    string
		lost    bool
		between func(e env, a string) // after A was written and read
	}{
		{"failover, then the group read on and applied", true, func(e env, a string) {
			failover(e, a)
			add(e, after(a))
			e.read(true)
		}},
		{"failover, then the group read on, not applied yet", true, func(e env, a string) {
			failover(e, a)
			add(e, after(a))
			e.read(false)
		}},
		{"failover, then the group read on, one entry of two so far", true, func(e env, a string) {
			failover(e, a)
			add(e, after(a))
			add(e, after(after(a)))
			e.readN(1)
		}},
		{"the stream grew, one entry of two read so far", false, func(e env, a string) {
			add(e, "")
			add(e, "")
			e.readN(1)
		}},
		{"failover, the group not read on yet", true, func(e env, a string) {
			failover(e, a)
		}},
		{"the stream grew", false, func(e env, a string) {
			add(e, "")
			e.read(true)
		}},
		{"trimmed", false, func(e env, a string) {
			for range 3 {
				add(e, "")
			}
			e.read(true)
			if n, err := rdb.XTrimMaxLen(ctx, e.stream, 1).Result(); err != nil || n == 0 {
				e.t.Fatalf("XTRIM = %d, %v, want entries trimmed", n, err)
			}
		}},
		{"deleted", false, func(e env, a string) {
			add(e, "")
			e.read(true)
			if err := rdb.XDel(ctx, e.stream, a).Err(); err != nil {
				e.t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			e := env{t: t, stream: redistest.KeyPrefix(t) + "events"}
			c := New(rdb, state.New(state.Config{}), &Options{Stream: e.stream, Group: DefaultGroup, Logger: logs.logger()})
			if !c.isReplayed() {
				t.Fatal("a collector that is no replica waits for a replay")
			}
			// Reads as fetch does: new entries, counted, then applied.
			count := int64(100)
			e.readN = func(n int64) {
				count = n
				defer func() { count = 100 }()
				e.read(true)
			}
			e.read = func(apply bool) string {
				t.Helper()
				res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: DefaultGroup, Consumer: "c", Streams: []string{e.stream, ">"}, Count: count, Block: -1}).Result()
				if err != nil || len(res) != 1 || len(res[0].Messages) == 0 {
					t.Fatalf("XREADGROUP = %v, %v, want new entries", res, err)
				}
				msgs := res[0].Messages
				c.countFresh(msgs)
				if apply {
					c.lastApplied = msgs[len(msgs)-1].ID
				}
				return msgs[len(msgs)-1].ID
			}
			poll := func() {
				t.Helper()
				if _, _, err := c.inspect(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := rdb.XGroupCreateMkStream(ctx, e.stream, DefaultGroup, "0").Err(); err != nil {
				t.Fatal(err)
			}
			e.old = []string{add(e, ""), add(e, "")}
			e.read(true)
			poll()
			poll() // nothing read, nothing added
			a := add(e, "")
			e.read(true)
			tc.between(e, a)
			poll()
			if got := len(logs.lines(said)); tc.lost && got != 1 || !tc.lost && got != 0 {
				t.Errorf("%q said %d times, want lost %v:\n%s", said, got, tc.lost, logs.String())
			}
			poll()
			if got := len(logs.lines(said)); tc.lost && got != 1 || !tc.lost && got != 0 {
				t.Errorf("%q said %d times after another poll, want lost %v (once)", said, got, tc.lost)
			}
		})
	}
}

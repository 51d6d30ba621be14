package collector

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestReadCountFollowsEntrySize: a read asks for as many entries as 16 MB
// holds at the size of the previous read's largest entry, so a writer of 4 MB
// entries is read 4 at a time, an emitter's entries 64 at a time, and a
// serve that has read nothing yet asks for no more than 2 entries of the
// largest size a packed entry may have.
func TestReadCountFollowsEntrySize(t *testing.T) {
	c := &Follower{opt: Options{Count: 64}}
	if got, want := c.count(), readBudget/event.MaxBatchBytes; got != want {
		t.Fatalf("count before any read = %d, want %d", got, want)
	}
	entry := func(n int) redis.XMessage {
		return redis.XMessage{ID: "1-0", Values: map[string]any{"b": strings.Repeat("x", n)}}
	}
	for _, tc := range []struct {
		sizes []int
		want  int
	}{
		{[]int{300, 200 << 10, 100}, 64},  // an emitter's entries
		{[]int{4 << 20, 1000}, 3},         // 4 MB and the ID and field name: 3 fit 16 MB
		{[]int{8 << 20}, 1},               // the largest packed entry
		{[]int{64 << 20}, 1},              // larger (malformed): still one at a time
		{[]int{100 << 10, 128 << 10}, 64}, // back to small entries: back to Count
	} {
		msgs := make([]redis.XMessage, 0, len(tc.sizes))
		for _, n := range tc.sizes {
			msgs = append(msgs, entry(n))
		}
		c.sized(msgs)
		if got := c.count(); got != min(tc.want, 64) {
			t.Errorf("after entries of %v bytes: count = %d, want %d", tc.sizes, got, min(tc.want, 64))
		}
	}
	c.sized(nil) // a read that found nothing changes nothing
	if got := c.count(); got != 64 {
		t.Errorf("after an empty read: count = %d, want 64", got)
	}
}

// TestReadBoundedInBytes: a read through the group brings at most
// readBudget bytes and one entry more, whatever sizes the writer chose and
// whatever the previous read brought; this consumer's pending entries are
// read back the same way; an entry larger than any that decodes is never
// sent, only named by its size.
func TestReadBoundedInBytes(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	stream := redistest.KeyPrefix(t) + "events"
	if err := rdb.XGroupCreateMkStream(ctx, stream, DefaultGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	agg, _ := testAgg(t, state.Config{})
	c := New(rdb, agg, &Options{Stream: stream, Group: DefaultGroup, Consumer: "c"})
	addSizedEntries(t, rdb, stream, maxEntryBytes+1)

	var sizes []int // of the reads
	var ids []string
	stubs := 0
	for range 64 {
		msgs, scripted, err := c.readGroup(ctx, ">", c.readCount())
		if err != nil || !scripted {
			t.Fatalf("readGroup = %v, scripted %v; want the script's read", err, scripted)
		}
		if len(msgs) == 0 {
			break
		}
		sizes = append(sizes, readBytes(msgs))
		for _, m := range msgs {
			ids = append(ids, m.ID)
			if size, ok := oversized(m); ok {
				stubs++
				if want := strconv.Itoa(maxEntryBytes + 1 + len(m.ID) + len("v1b")); size != want {
					t.Errorf("oversize stub names %s bytes, want %s", size, want)
				}
			}
		}
	}
	if len(ids) != 130 || stubs != 1 {
		t.Fatalf("read %d entries with %d oversize stubs, want 130 and 1 (reads of %v bytes)", len(ids), stubs, sizes)
	}
	// The first read takes all 64 small entries (6.4 MB) and large ones
	// until 16 MB: never 64 large ones after 64 small.
	checkReadSizes(t, "read", sizes)

	// Nothing acknowledged: the pending list reads back in the same bounds.
	var again []string
	after := "0"
	for range 64 {
		msgs, _, err := c.readGroup(ctx, after, c.readCount())
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			break
		}
		if n := readBytes(msgs); n > readBudget+3<<20+1000 {
			t.Errorf("pending read brought %d bytes, want at most the budget and one entry", n)
		}
		for _, m := range msgs {
			again = append(again, m.ID)
		}
		after = msgs[len(msgs)-1].ID
	}
	if !slices.Equal(again, ids) {
		t.Errorf("pending entries read back: %d, want the %d read", len(again), len(ids))
	}
}

// TestReadWithoutScriptsFallsBack: a Redis user without EVALSHA still
// ingests, through XREADGROUP sized by the previous read, and the log says
// once what to grant.
func TestReadWithoutScriptsFallsBack(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	admin := srv.Client(t)
	ctx := context.Background()
	noScripts := slices.DeleteFunc(slices.Clone(collectorACL[:23]), func(a any) bool { return a == "+evalsha" || a == "+eval" })
	args := append([]any{"ACL", "SETUSER", "collector", "on", ">secret"}, noScripts...)
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "collector", Password: "secret"})
	t.Cleanup(func() { rdb.Close() })
	var logs logBuffer
	agg, _ := testAgg(t, state.Config{})
	c := startFollower(t, rdb, agg, &Options{Group: DefaultGroup, Logger: logs.logger()})
	for i := range 3 {
		xaddPacked(t, admin, event.DefaultStream, lockEvents([]string{"app:" + strconv.Itoa(i)}, 10, time.Now()))
	}
	redistest.WaitFor(t, waitLimit, "events applied", func() bool { return eventsTotal(agg) >= 60 })
	redistest.WaitFor(t, waitLimit, "nothing pending", func() bool { return pendingCount(t, admin, event.DefaultStream, c.opt.Group) == 0 })
	if got := eventsTotal(agg); got != 60 {
		t.Errorf("EventsTotal = %d, want 60", got)
	}
	if !c.noScript.Load() {
		t.Error("the follower did not notice that EVALSHA is refused")
	}
	if got := logs.lines("EVALSHA refused"); len(got) != 1 || !strings.Contains(got[0], "grant +evalsha +eval") {
		t.Errorf("log lines about EVALSHA = %q, want one naming the grant", got)
	}
}

// TestClaimBoundedInBytes: claiming the entries a dead consumer left
// pending brings, like a read, at most readBudget bytes and one entry more;
// the stub of an entry too large to decode, never the entry; and counts an
// entry trimmed while pending. XAUTOCLAIM alone has no byte limit: before,
// one claim handed over as many whole entries as the previous read's count.
func TestClaimBoundedInBytes(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	stream := redistest.KeyPrefix(t) + "events"
	if err := rdb.XGroupCreateMkStream(ctx, stream, DefaultGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	addSizedEntries(t, rdb, stream, 40<<20)
	// A consumer reads everything and dies; one entry is trimmed after.
	read, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: DefaultGroup, Consumer: "dead", Streams: []string{stream, ">"}, Count: 200}).Result()
	if err != nil || len(read) != 1 || len(read[0].Messages) != 130 {
		t.Fatalf("the dead consumer's read: %v, %d streams", err, len(read))
	}
	read = nil
	trimmed := "" // a small entry's
	if ids, err := rdb.XRangeN(ctx, stream, "-", "+", 2).Result(); err != nil {
		t.Fatal(err)
	} else {
		trimmed = ids[1].ID
	}
	if err := rdb.XDel(ctx, stream, trimmed).Err(); err != nil {
		t.Fatal(err)
	}

	// One pass of claims once every entry is idle for ClaimMinIdle (a
	// second pass would take back this consumer's own, idle again).
	const minIdle = 50 * time.Millisecond
	redistest.WaitFor(t, waitLimit, "the dead consumer's entries idle", func() bool {
		p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: DefaultGroup, Idle: minIdle, Start: "-", End: "+", Count: 200}).Result()
		return err == nil && len(p) == 130
	})
	agg, _ := testAgg(t, state.Config{})
	c := New(rdb, agg, &Options{Stream: stream, Group: DefaultGroup, Consumer: "c", ClaimMinIdle: minIdle})
	var sizes []int // of the claims that brought entries
	var ids []string
	stubs, deleted := 0, 0
	for start := "0-0"; ; {
		msgs, next, gone, err := c.claimGroup(ctx, start, c.readCount())
		if err != nil {
			t.Fatal(err)
		}
		deleted += gone
		if len(msgs) > 0 {
			sizes = append(sizes, readBytes(msgs))
			c.sized(msgs)
		}
		for _, m := range msgs {
			ids = append(ids, m.ID)
			if size, ok := oversized(m); ok {
				stubs++
				if want := strconv.Itoa(40<<20 + len(m.ID) + len("v1b")); size != want {
					t.Errorf("oversize stub names %s bytes, want %s", size, want)
				}
			}
		}
		if next == "0-0" || next == start {
			break
		}
		start = next
	}
	if len(ids) != 129 || stubs != 1 || deleted != 1 {
		t.Fatalf("claimed %d entries with %d oversize stubs, %d trimmed; want 129, 1 and 1 (claims of %v bytes)", len(ids), stubs, deleted, sizes)
	}
	if slices.Contains(ids, trimmed) {
		t.Errorf("the trimmed entry %s was claimed", trimmed)
	}
	checkReadSizes(t, "claim", sizes)
	// Claimed: the pending entries are this consumer's now.
	if p, err := rdb.XPending(ctx, stream, DefaultGroup).Result(); err != nil || p.Consumers["c"] != 129 || p.Consumers["dead"] != 0 {
		t.Errorf("pending after the claims: %+v, %v; want 129 of c's", p, err)
	}
}

// addSizedEntries adds to stream 64 entries of 100 KB, 64 of 3 MB (192 MB
// in all), one of huge bytes and a small last one: what a writer who sends
// small entries and then large ones leaves for a read or a claim.
func addSizedEntries(t *testing.T, rdb *redis.Client, stream string, huge int) {
	t.Helper()
	small := strings.Repeat("s", 100<<10)
	for range 64 {
		xaddRaw(t, rdb, stream, "v", "1", "b", small)
	}
	large := strings.Repeat("L", 3<<20)
	for range 64 {
		xaddRaw(t, rdb, stream, "v", "1", "b", large)
	}
	xaddRaw(t, rdb, stream, "v", "1", "b", strings.Repeat("H", huge))
	xaddRaw(t, rdb, stream, "v", "1", "b", "last")
}

// checkReadSizes fails t unless each of the reads (or claims) of
// addSizedEntries's stream brought at most readBudget bytes and one 3 MB
// entry, so that its 192 MB took at least 12 of them.
func checkReadSizes(t *testing.T, what string, sizes []int) {
	t.Helper()
	for i, n := range sizes {
		if n > readBudget+3<<20+1000 {
			t.Errorf("%s %d brought %d bytes, want at most the budget (%d) and one entry", what, i, n, readBudget)
		}
	}
	if len(sizes) < 12 {
		t.Errorf("%d %ss for 192 MB, want at least 12 of at most 16 MB", len(sizes), what)
	}
}

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
	small := strings.Repeat("s", 100<<10)
	for range 64 {
		xaddRaw(t, rdb, stream, "v", "1", "b", small)
	}
	large := strings.Repeat("L", 3<<20)
	for range 64 {
		xaddRaw(t, rdb, stream, "v", "1", "b", large)
	}
	xaddRaw(t, rdb, stream, "v", "1", "b", strings.Repeat("H", maxEntryBytes+1))
	xaddRaw(t, rdb, stream, "v", "1", "b", "last")

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
	for i, n := range sizes {
		if n > readBudget+3<<20+1000 {
			t.Errorf("read %d brought %d bytes, want at most the budget (%d) and one entry", i, n, readBudget)
		}
	}
	// The first read takes all 64 small entries (6.4 MB) and large ones
	// until 16 MB: never 64 large ones after 64 small.
	if len(sizes) < 12 {
		t.Errorf("%d reads for 192 MB, want at least 12 of at most 16 MB", len(sizes))
	}

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

package collector

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
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

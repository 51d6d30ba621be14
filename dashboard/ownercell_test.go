package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/lock"
)

// TestOwnerCellCutsOnScreenKeepsTheTitle: every card and row shows an owner
// cut to 48 bytes with the whole name in its title, whichever side read it.
// The key page's card of the holder read from Redis had the two swapped, and
// showed a 100-character owner whole.
func TestOwnerCellCutsOnScreenKeepsTheTitle(t *testing.T) {
	long := "payments-worker-" + strings.Repeat("x", 84)
	now := time.Now()
	s := &server{}
	cards := map[string]ownerCell{
		"read from Redis":       holderFromLock(&lock.Holder{Owner: long, Since: now.Add(-time.Second)}, now).Owner,
		"seen by the collector": s.holderFromInfo(state.LockInfo{Key: "k", Owner: long, Held: true, Since: now.Add(-time.Second)}, now).Owner,
		"linked, from a row":    linkedOwnerCell(long),
	}
	for name, c := range cards {
		if c.Full != long {
			t.Errorf("%s: title %q, want the whole owner %q", name, c.Full, long)
		}
		if want := long[:48] + "…"; c.Short != want {
			t.Errorf("%s: on screen %q, want the owner cut to %q", name, c.Short, want)
		}
		if c.Href != ownerPath(long) {
			t.Errorf("%s: link %q, want the owner's page %q", name, c.Href, ownerPath(long))
		}
	}
	if c := newOwnerCell("w1"); c.Short != "w1" || c.Full != "w1" || c.Href != "" {
		t.Errorf("newOwnerCell(\"w1\") = %+v, want the short name as it is, and no link", c)
	}
}

package scalesim

import (
	"slices"
	"testing"
)

// TestOwnershipSimulation is the simulation docs/scaling.md quotes: for the
// partition and replica counts of the 10x and 100x designs it checks that
// rendezvous ownership with R = 2 balances the partitions and moves only the
// dead member's share when one dies, and logs the figures (go test -v).
func TestOwnershipSimulation(t *testing.T) {
	for _, c := range []struct{ partitions, members int }{
		{16, 4},   // 10x: ~5 M events/s over 4 collectors (2 copies each partition)
		{64, 8},   // a Cluster of 8 masters
		{256, 40}, // 100x: ~50 M events/s
	} {
		members := Members(c.members)
		const r = 2
		before := Assignment(members, c.partitions, r)
		imb := Imbalance(before, members)
		// Each partition has exactly r distinct owners.
		for p := range c.partitions {
			o := Owners(members, p, r)
			if len(o) != r || o[0] == o[1] {
				t.Fatalf("partition %d owners = %q, want %d distinct", p, o, r)
			}
		}
		// One member dies: only its partitions move, one new owner each.
		dead := members[c.members/2]
		alive := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == dead })
		after := Assignment(alive, c.partitions, r)
		moved := Moved(before, after)
		if moved != len(before[dead]) {
			t.Errorf("%d partitions/%d members: %d ownerships moved when %s died, want its %d", c.partitions, c.members, moved, dead, len(before[dead]))
		}
		// A member joins: it takes a share, no other ownership changes.
		joined := append(slices.Clone(members), "lockscope-new")
		afterJoin := Assignment(joined, c.partitions, r)
		gained := len(afterJoin["lockscope-new"])
		if m := Moved(before, afterJoin); m != gained {
			t.Errorf("%d partitions/%d members: a join moved %d ownerships, want only the %d the newcomer took", c.partitions, c.members, m, gained)
		}
		// Balance: with ≥ 4 partitions per member the busiest owns at most
		// twice the mean (rendezvous hashing is random, not round-robin).
		if imb > 2 {
			t.Errorf("%d partitions/%d members: busiest member owns %.2f× the mean", c.partitions, c.members, imb)
		}
		t.Logf("partitions=%d members=%d r=%d: busiest/mean %.2f; a death moves %d of %d ownerships (%.1f%%); a join moves %d",
			c.partitions, c.members, r, imb, moved, c.partitions*r, 100*float64(moved)/float64(c.partitions*r), gained)
	}
}

func TestOwnersStable(t *testing.T) {
	m := Members(5)
	shuffled := []string{m[3], m[1], m[4], m[0], m[2]}
	for p := range 100 {
		if a, b := Owners(m, p, 2), Owners(shuffled, p, 2); !slices.Equal(a, b) {
			t.Fatalf("Owners depends on member order: %q vs %q", a, b)
		}
	}
}

package event

import (
	"strconv"
	"strings"
	"testing"
)

func TestSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for _, c := range []struct {
		key  string
		want uint16
	}{
		{"123456789", 0x31C3 % 16384}, // the spec's CRC16 check value
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"user1000", 3443},
		{"foo{}{bar}", Slot("foo{}{bar}")}, // empty tag: whole key
		{"foo{{bar}}zap", Slot("{bar")},    // tag is "{bar"
		{"foo{bar}{zap}", Slot("bar")},     // first tag wins
		{"{", Slot("{")},
	} {
		if got := Slot(c.key); got != c.want {
			t.Errorf("Slot(%q) = %d, want %d", c.key, got, c.want)
		}
	}
	if Slot("foo{}{bar}") == Slot("bar") {
		t.Errorf("Slot(foo{}{bar}) used the second tag")
	}
}

func TestStreams(t *testing.T) {
	if got := Streams("", 1); len(got) != 1 || got[0] != DefaultStream {
		t.Errorf("Streams(\"\", 1) = %q, want [%q]", got, DefaultStream)
	}
	if got := Streams("s", 0); len(got) != 1 || got[0] != "s" {
		t.Errorf("Streams(s, 0) = %q, want [s]", got)
	}
	for _, n := range []int{2, 3, 8, 64} {
		got := Streams("ev", n)
		if len(got) != n {
			t.Fatalf("Streams(ev, %d) has %d keys", n, len(got))
		}
		seen := map[string]bool{}
		for p, s := range got {
			if !strings.HasPrefix(s, "ev:{") || seen[s] {
				t.Errorf("Streams(ev, %d)[%d] = %q: not a new ev:{tag} key", n, p, s)
			}
			seen[s] = true
			// Partition p's slot lies in its even share of the slots.
			lo, hi := p*16384/n, (p+1)*16384/n
			if sl := int(Slot(s)); sl < lo || sl >= hi {
				t.Errorf("Streams(ev, %d)[%d] = %q in slot %d, want in [%d, %d)", n, p, s, sl, lo, hi)
			}
		}
		// Stable: the emitter and the collector compute the same names.
		again := Streams("ev", n)
		for p := range got {
			if got[p] != again[p] {
				t.Errorf("Streams(ev, %d) not stable: %q then %q", n, got[p], again[p])
			}
		}
	}
}

func TestPartitionOf(t *testing.T) {
	const n = 4
	counts := make([]int, n)
	for i := range 40000 {
		k := "order:" + string(rune('a'+i%26)) + strings.Repeat("x", i%7) + strconv.Itoa(i)
		p := PartitionOf(k, n)
		if p < 0 || p >= n {
			t.Fatalf("PartitionOf(%q, %d) = %d", k, n, p)
		}
		if PartitionOf(k, n) != p {
			t.Fatalf("PartitionOf(%q) not stable", k)
		}
		counts[p]++
	}
	for p, c := range counts {
		if c < 9000 || c > 11000 {
			t.Errorf("partition %d got %d of 40000 keys, want about 10000 (%v)", p, c, counts)
		}
	}
	if PartitionOf("anything", 1) != 0 || PartitionOf("anything", 0) != 0 {
		t.Errorf("PartitionOf with n <= 1 is not 0")
	}
	if a := testing.AllocsPerRun(100, func() { PartitionOf("workflow:123", 8) }); a != 0 {
		t.Errorf("PartitionOf allocates %v times", a)
	}
}

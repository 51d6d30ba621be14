package state

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/lockscope/lockscope/event/class"
)

func TestClassRulesAndCap(t *testing.T) {
	a, _ := newTestAggregator(t, Config{
		MaxClasses: 3,
		Classes: []ClassRule{
			{Pattern: "payment:*"}, // class is the pattern
			{Pattern: "tenant:*:billing", Class: "billing"},
			{Pattern: "bad:*", Class: "bad\xff\nclass"}, // sanitised
		},
	})
	classOf := func(key string) string {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.classOfLocked(key).name
	}
	tests := []struct{ key, want string }{
		{"payment:42", "payment:*"},
		{"tenant:acme:billing", "billing"},
		{"bad:1", "bad\uFFFD?class"},
		{"a:1", "a:*"},
		{"b:1", "b:*"},
		{"c:1", "c:*"},
		{"d:1", otherClass}, // fourth derived class: over the cap
		{"a:2", "a:*"},      // known classes stay
		{"payment:x", "payment:*"},
		{"other", otherClass},
		{"tenant:beta:billing", "billing"}, // rule classes are not capped
	}
	for _, tc := range tests {
		if got := classOf(tc.key); got != tc.want {
			t.Errorf("class(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
	want := []string{"a:*", "b:*", "bad\uFFFD?class", "billing", "c:*", "other", "payment:*"}
	if got := a.Classes(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Classes() = %q, want %q", got, want)
	}
}

// appendClass appends the class of key to dst and reports whether a user
// rule produced it. User rules are tried in order; the first match wins.
// Otherwise the default derivation applies (see class.AppendDefault).
// It is the reference Aggregator.classOfLocked, which remembers recent key
// prefixes, must agree with.
func appendClass(dst []byte, key string, rules class.Rules) ([]byte, bool) {
	if c, ok := rules.Match(key); ok {
		return append(dst, c...), true
	}
	return class.AppendDefault(dst, key), false
}

// TestClassOfRemembersPrefixes checks that the classes classOfLocked gives
// from its memory of recent key prefixes are those the derivation gives:
// keys that share a prefix but whose last segment is no identifier, rules
// that match some identifiers after a remembered prefix, prefixes pushed
// out of the memory and back, and classes cut at class.MaxLen.
func TestClassOfRemembersPrefixes(t *testing.T) {
	cfg := Config{MaxClasses: 100_000, Classes: []ClassRule{{Pattern: "order:9*", Class: "nines"}}}
	a, _ := newTestAggregator(t, cfg)
	rules := class.NewRules(cfg.Classes)
	long := strings.Repeat("segment-", 12)
	prefixes := []string{"order:", "job/", "tenant:acme:invoice:", "a:b/c:", long + ":", long[:90] + "/",
		"\xff\x01:", "é:", ":", "user:v2:"}
	for i := range 12 {
		prefixes = append(prefixes, fmt.Sprintf("p%d:", i)) // more than the memory holds
	}
	lasts := []string{"123456", "9", "90", "deadbeef00", "abc", "550e8400-e29b-41d4-a716-446655440000",
		"01ARZ3NDEKTSV4RRFFQ69G5FAV", "lock", "v2", "", "12-34", "x.1", "ABCDEF12"}
	n := 0
	for round := range 3 {
		for i, p := range prefixes {
			for j := range lasts {
				key := p + lasts[(i+j+round)%len(lasts)]
				a.mu.Lock()
				got := a.classOfLocked(key).name
				a.mu.Unlock()
				want, _ := appendClass(nil, key, rules)
				if got != string(want) {
					t.Errorf("class(%q) = %q, want %q", key, got, want)
				}
				n++
			}
		}
	}
	if n < 500 {
		t.Fatalf("checked %d keys", n)
	}
}

// BenchmarkClassOfNewKeys measures finding the class of a new key in a
// stream of distinct keys of three classes, interleaved: what every
// acquisition costs when keys are order or job ids.
//
//	go test -run '^$' -bench BenchmarkClassOfNewKeys ./collector/
func BenchmarkClassOfNewKeys(b *testing.B) {
	a, _ := newTestAggregator(b, Config{})
	keys := make([]string, 3*1024)
	for i := range keys {
		switch i % 3 {
		case 0:
			keys[i] = "order:" + strconv.Itoa(1_000_000+i)
		case 1:
			keys[i] = "job/550e8400-e29b-41d4-a716-" + fmt.Sprintf("%012x", i)
		default:
			keys[i] = "tenant:acme:invoice:" + strconv.Itoa(i)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	b.ResetTimer()
	for i := range b.N {
		if a.classOfLocked(keys[i%len(keys)]) == nil {
			b.Fatal("no class")
		}
	}
}

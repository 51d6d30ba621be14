package state

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDefaultClass(t *testing.T) {
	long := strings.Repeat("segment:", 2000) // 16 kB of separators
	tests := []struct {
		key, want string
	}{
		{"workflow:123", "workflow:*"},
		{"workflow:987", "workflow:*"},
		{"orders/2024/invoice/17", "orders/*/invoice/*"},
		{"user:550e8400-e29b-41d4-a716-446655440000:profile", "user:*:profile"},
		{"user:550E8400-E29B-41D4-A716-446655440000", "user:*"},
		{"blob:deadbeef", "blob:*"},
		{"blob:deadbee", "blob:deadbee"}, // 7 hex digits: a word, not an id
		{"commit:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "commit:*"},
		{"job-42", "job-*"},
		{"report_2024_01_15.pdf", "report_*_*_*.pdf"},
		{"host:10.0.0.1", "host:*.*.*.*"},
		{"ulid:01ARZ3NDEKTSV4RRFFQ69G5FAV", "ulid:*"},
		{"name:accountingdepartment", "name:accountingdepartment"}, // letters only
		{"cache", "cache"},
		{"", ""},
		{":", ":"},
		{"a::b", "a::b"},
		{"lock:" + "\xff\xfe" + ":1", "lock:\uFFFD\uFFFD:*"},
		{"lock:line\nbreak", "lock:line?break"},
		{"lock:<script>alert(1)</script>", "lock:<script>alert(1)</script>"}, // "/" splits, nothing varies
		{"é:42", "é:*"},
	}
	for _, tc := range tests {
		got := string(appendDefaultClass(nil, tc.key))
		if got != tc.want {
			t.Errorf("defaultClass(%q) = %q, want %q", tc.key, got, tc.want)
		}
		if got := DefaultClass(tc.key); got != tc.want {
			t.Errorf("DefaultClass(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
	got := string(appendDefaultClass(nil, long))
	if len(got) > maxClassLen || !strings.HasSuffix(got, "*") || !strings.HasPrefix(got, "segment:segment:") {
		t.Errorf("defaultClass(16 kB key) = %q (%d bytes), want a prefix of at most %d bytes ending in '*'", got, len(got), maxClassLen)
	}
	huge := "x" + strings.Repeat("é", 5000)
	if got := string(appendDefaultClass(nil, huge)); len(got) > maxClassLen || !utf8.ValidString(got) || !strings.HasSuffix(got, "*") {
		t.Errorf("defaultClass(10 kB of é) = %q (%d bytes), want valid UTF-8 of at most %d bytes ending in '*'", got, len(got), maxClassLen)
	}
}

// Class rules read patterns as --watch does, in Redis's glob grammar
// (collector/internal/glob, held against Redis there): `a:[xy]*` is a set,
// not the bytes '[', 'x', 'y', ']'.
func TestClassRulesUseRedisGlobs(t *testing.T) {
	rules := compileRules([]ClassRule{{Pattern: "a:[xy]*", Class: "xy"}, {Pattern: "lit:\\[*", Class: "bracket"},
		{Pattern: "payment:*"}, {Pattern: "job-?"}})
	for _, tc := range []struct {
		key, want string
		ok        bool
	}{
		{"a:x1", "xy", true},
		{"a:y", "xy", true},
		{"a:z1", "", false},
		{"a:[xy]1", "", false},
		{"lit:[1", "bracket", true},
		{"lit:x", "", false},
		{"payment:a/b:c", "payment:*", true},
		{"payments:1", "", false},
		{"job-1", "job-?", true},
		{"job-12", "", false},
	} {
		if got, ok := ruleClass(tc.key, rules); got != tc.want || ok != tc.ok {
			t.Errorf("ruleClass(%q) = %q, %v; want %q, %v", tc.key, got, ok, tc.want, tc.ok)
		}
	}
}

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
		{"d:1", OtherClass}, // fourth derived class: over the cap
		{"a:2", "a:*"},      // known classes stay
		{"payment:x", "payment:*"},
		{"other", OtherClass},
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
// Otherwise the default derivation applies (see appendDefaultClass).
// It is the reference Aggregator.classOfLocked, which remembers recent key
// prefixes, must agree with.
func appendClass(dst []byte, key string, rules []classRule) ([]byte, bool) {
	if c, ok := ruleClass(key, rules); ok {
		return append(dst, c...), true
	}
	return appendDefaultClass(dst, key), false
}

// TestClassOfRemembersPrefixes checks that the classes classOfLocked gives
// from its memory of recent key prefixes are those the derivation gives:
// keys that share a prefix but whose last segment is no identifier, rules
// that match some identifiers after a remembered prefix, prefixes pushed
// out of the memory and back, and classes cut at maxClassLen.
func TestClassOfRemembersPrefixes(t *testing.T) {
	cfg := Config{MaxClasses: 100_000, Classes: []ClassRule{{Pattern: "order:9*", Class: "nines"}}}
	a, _ := newTestAggregator(t, cfg)
	rules := compileRules(cfg.Classes)
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

// FuzzClass checks that any key yields a class that is a bounded, valid
// UTF-8 label value, deterministically.
func FuzzClass(f *testing.F) {
	for _, s := range []string{
		"workflow:123", "user:550e8400-e29b-41d4-a716-446655440000", "a/b/c", "\xff\xfe:1",
		strings.Repeat("ab:", 100), strings.Repeat("é", 60) + ":1", "x-1_2.3", "",
		strings.Repeat("segment-", 12) + ":42", "tenant:acme:invoice:deadbeef", "acct:0f:[x", "acct:0f:[:",
	} {
		f.Add(s)
	}
	rules := compileRules([]ClassRule{{Pattern: "pay*ment:?"}, {Pattern: "*:*:*:*:x", Class: "deep"}, {Pattern: "acct:[0-9a-f]*:\\[[^:]", Class: "acct"}})
	f.Fuzz(func(t *testing.T, key string) {
		got, _ := appendClass(nil, key, rules)
		again, _ := appendClass(nil, key, rules)
		if string(got) != string(again) {
			t.Fatalf("class(%q) not deterministic: %q then %q", key, got, again)
		}
		if len(got) > maxClassLen {
			t.Fatalf("class(%q) = %q: %d bytes, want at most %d", key, got, len(got), maxClassLen)
		}
		if !utf8.Valid(got) {
			t.Fatalf("class(%q) = %q: not valid UTF-8", key, got)
		}
		for _, c := range got {
			if c < 0x20 || c == 0x7f {
				t.Fatalf("class(%q) = %q: control character", key, got)
			}
		}
		if len(key) <= maxClassLen/3 && utf8.ValidString(key) && !strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			// A short clean key's class keeps its separators in place.
			if strings.Count(string(got), ":") != strings.Count(key, ":") && string(got) != "deep" && string(got) != "acct" {
				t.Fatalf("class(%q) = %q: separators changed", key, got)
			}
		}
		// What Aggregator.classOfLocked's memory of prefixes rests on: a key
		// whose last segment derives to '*' whole has the class of any other
		// key with the same prefix and such a last segment.
		if i := lastSegment(key); i > 0 && wholeIdentifier(key[i:]) {
			own := appendDefaultClass(nil, key)
			for _, id := range []string{"1", "550e8400-e29b-41d4-a716-446655440000", "01ARZ3NDEKTSV4RRFFQ69G5FAV"} {
				if other := appendDefaultClass(nil, key[:i]+id); string(other) != string(own) {
					t.Fatalf("class(%q) = %q, but class(%q) = %q", key, own, key[:i]+id, other)
				}
			}
		}
	})
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

package class

import (
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
		got := string(AppendDefault(nil, tc.key))
		if got != tc.want {
			t.Errorf("defaultClass(%q) = %q, want %q", tc.key, got, tc.want)
		}
		if got := Default(tc.key); got != tc.want {
			t.Errorf("Default(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
	got := string(AppendDefault(nil, long))
	if len(got) > MaxLen || !strings.HasSuffix(got, "*") || !strings.HasPrefix(got, "segment:segment:") {
		t.Errorf("defaultClass(16 kB key) = %q (%d bytes), want a prefix of at most %d bytes ending in '*'", got, len(got), MaxLen)
	}
	huge := "x" + strings.Repeat("é", 5000)
	if got := string(AppendDefault(nil, huge)); len(got) > MaxLen || !utf8.ValidString(got) || !strings.HasSuffix(got, "*") {
		t.Errorf("defaultClass(10 kB of é) = %q (%d bytes), want valid UTF-8 of at most %d bytes ending in '*'", got, len(got), MaxLen)
	}
}

// Class rules read patterns as --watch does, in Redis's glob grammar
// (Match, held against Redis in glob_test.go): `a:[xy]*` is a set,
// not the bytes '[', 'x', 'y', ']'.
func TestClassRulesUseRedisGlobs(t *testing.T) {
	rules := NewRules([]Rule{{Pattern: "a:[xy]*", Class: "xy"}, {Pattern: "lit:\\[*", Class: "bracket"},
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
		if got, ok := rules.Match(tc.key); got != tc.want || ok != tc.ok {
			t.Errorf("Rules.Match(%q) = %q, %v; want %q, %v", tc.key, got, ok, tc.want, tc.ok)
		}
	}
}

// appendClass appends the class of key to dst and reports whether a user
// rule produced it: the first rule that matches, else the default.
func appendClass(dst []byte, key string, rules Rules) ([]byte, bool) {
	if c, ok := rules.Match(key); ok {
		return append(dst, c...), true
	}
	return AppendDefault(dst, key), false
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
	rules := NewRules([]Rule{{Pattern: "pay*ment:?"}, {Pattern: "*:*:*:*:x", Class: "deep"}, {Pattern: "acct:[0-9a-f]*:\\[[^:]", Class: "acct"}})
	f.Fuzz(func(t *testing.T, key string) {
		got, _ := appendClass(nil, key, rules)
		again, _ := appendClass(nil, key, rules)
		if string(got) != string(again) {
			t.Fatalf("class(%q) not deterministic: %q then %q", key, got, again)
		}
		if len(got) > MaxLen {
			t.Fatalf("class(%q) = %q: %d bytes, want at most %d", key, got, len(got), MaxLen)
		}
		if !utf8.Valid(got) {
			t.Fatalf("class(%q) = %q: not valid UTF-8", key, got)
		}
		for _, c := range got {
			if c < 0x20 || c == 0x7f {
				t.Fatalf("class(%q) = %q: control character", key, got)
			}
		}
		if len(key) <= MaxLen/3 && utf8.ValidString(key) && !strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			// A short clean key's class keeps its separators in place.
			if strings.Count(string(got), ":") != strings.Count(key, ":") && string(got) != "deep" && string(got) != "acct" {
				t.Fatalf("class(%q) = %q: separators changed", key, got)
			}
		}
		// What Aggregator.classOfLocked's memory of prefixes rests on: a key
		// whose last segment derives to '*' whole has the class of any other
		// key with the same prefix and such a last segment.
		if prefix, ok := SharedPrefix(key); ok {
			i := len(prefix)
			own := AppendDefault(nil, key)
			for _, id := range []string{"1", "550e8400-e29b-41d4-a716-446655440000", "01ARZ3NDEKTSV4RRFFQ69G5FAV"} {
				if other := AppendDefault(nil, key[:i]+id); string(other) != string(own) {
					t.Fatalf("class(%q) = %q, but class(%q) = %q", key, own, key[:i]+id, other)
				}
			}
		}
	})
}

func TestIsUUID(t *testing.T) {
	for s, want := range map[string]bool{
		"6d2b8f4e-1c3a-4b5d-9e8f-0a1b2c3d4e5f": true,
		"6D2B8F4E-1C3A-4B5D-9E8F-0A1B2C3D4E5F": true,
		"6d2b8f4e1c3a4b5d9e8f0a1b2c3d4e5f":     false, // no dashes: a hex token, not a UUID
		"6d2b8f4e-1c3a-4b5d-9e8f-0a1b2c3d4e5":  false,
		"6d2b8f4e-1c3a-4b5d-9e8f-0a1b2c3d4e5g": false,
		"6d2b8f4e-1c3a-4b5d_9e8f-0a1b2c3d4e5f": false,
		"":                                     false,
	} {
		if got := IsUUID(s); got != want {
			t.Errorf("IsUUID(%q) = %v, want %v", s, got, want)
		}
	}
}

package collector

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event/class"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// Keys and patterns class.Match (the glob grammar of --watch and --class
// patterns) is held against Redis with: the edges of Redis's
// grammar (sets, ranges either way round, negation, escapes inside and
// outside sets, a set or an escape left open), the patterns --class rules
// were written with before the grammars were one, and the pattern whose two
// readings made them one (`a:[xy]*`).
var (
	matchKeys = []string{"", "a", "ab", "abc", "ax", "bx", "dx", "*x", "xx", "a\\", "[ab", "]x", "-x", "^x",
		"aabbcc", "a\nb", "%?/", "<script>", "lock:1", "lock:1:2", "a]b", "caab",
		"a:x", "a:y1", "a:z1", "a:[xy]", "payment:1", "payment:a/b:c", "payments:1", "a:b:lock", "a:b:locks",
		"job-1", "job-12", "axxbyyc", "axxbyy", "a*", "a?", "\xff\x00:1", "1x", "\x801x"}
	matchPatterns = []string{"*", "a*", "*b", "a?c", "?", "[abc]x", "[^a]x", "[a-c]x", "[c-a]x", "\\*x", "a\\\\",
		"[ab", "[a\\]]x", "**a**", "*a*b*c*", "[]x", "[-]x", "[^]x", "a\\", "lock:*", "lock:?", "*[b]", "c*a*b",
		"a:[xy]*", "a:[^xy]*", "a:\\[xy\\]", "payment:*", "*:lock", "job-?", "", "a*b*c", "a\\*", "a\\?",
		"[\xff]*", "*\\", "[\x80-0]x"}
)

// Match agrees with what Redis's KEYS (and so SCAN MATCH and PSUBSCRIBE,
// which share its matcher) matches, key by key.
func TestMatchAgreesWithRedis(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	for _, k := range matchKeys {
		if err := rdb.Set(ctx, prefix+k, "v", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range matchPatterns {
		got, err := rdb.Keys(ctx, escape(prefix)+p).Result()
		if err != nil {
			t.Fatal(err)
		}
		var redisSays []string
		for _, k := range got {
			redisSays = append(redisSays, strings.TrimPrefix(k, prefix))
		}
		var weSay []string
		for _, k := range matchKeys {
			if class.Match(escape(prefix)+p, prefix+k) {
				weSay = append(weSay, k)
			}
			if class.Match(escape(prefix)+p, prefix+k) != class.Match(p, k) {
				t.Errorf("class.Match(%q, %q) changes with a literal prefix", p, k)
			}
		}
		slices.Sort(redisSays)
		slices.Sort(weSay)
		if !slices.Equal(weSay, redisSays) {
			t.Errorf("class.Match(%q) matches %q, Redis KEYS matches %q", p, weSay, redisSays)
		}
	}
}

// The readings the package documents, and the pattern of the issue that
// made --class and --watch one grammar.
func TestMatchDocumented(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"a:[xy]*", "a:x1", true},
		{"a:[xy]*", "a:y", true},
		{"a:[xy]*", "a:z1", false},
		{"a:[xy]*", "a:[xy]1", false},
		{"[z-a]", "m", true},
		{"[^a-c]", "d", true},
		{"[^a-c]", "b", false},
		{"[\\]]", "]", true},
		{"\\*", "*", true},
		{"\\*", "x", false},
		{"a\\", "a\\", true},
		{"[ab", "a", true},
		{"payment:*", "payment:a/b:c", true},
		{"job-?", "job-12", false},
		{"*a*a*a*b", strings.Repeat("a", 10000), false},
	} {
		if got := class.Match(tc.pattern, tc.s); got != tc.want {
			t.Errorf("class.Match(%q, %.20q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// FuzzMatch holds Match against Redis for any pattern and key: run the
// seeds with go test, or fuzz with a bounded count, e.g.
//
//	go test -run '^$' -fuzz FuzzMatch -fuzztime 20000x ./collector/
func FuzzMatch(f *testing.F) {
	for i, p := range matchPatterns {
		f.Add(p, matchKeys[i%len(matchKeys)])
	}
	srv := redistest.Shared(f)
	rdb := srv.Client(f)
	prefix := redistest.KeyPrefix(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, pattern, key string) {
		if len(pattern) > 64 || len(key) > 64 {
			return // long inputs add time, not cases
		}
		k := prefix + "k:" + key
		if err := rdb.Set(ctx, k, "v", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		defer rdb.Del(ctx, k)
		got, err := rdb.Keys(ctx, escape(prefix+"k:")+pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		redisSays := slices.Contains(got, k)
		if weSay := class.Match(pattern, key); weSay != redisSays {
			t.Errorf("class.Match(%q, %q) = %v, Redis KEYS says %v", pattern, key, weSay, redisSays)
		}
	})
}

// Match stays linear however many stars a pattern has: Redis's cut-off.
func TestMatchStaysLinear(t *testing.T) {
	// Backtracking would take some C(10000, 10) steps: it never returns, so the
	// test's own deadline, far past any host's speed, is the bound.
	key := strings.Repeat("a", 10_000)
	start := time.Now()
	matched := make(chan bool, 1)
	go func() { matched <- class.Match("*a*a*a*a*a*a*a*a*a*a*b", key) }()
	select {
	case m := <-matched:
		if m {
			t.Errorf("Match matched a key without b")
		}
		t.Logf("Match took %v on a 10 kB key", time.Since(start))
	case <-redistest.Context(t).Done():
		t.Fatalf("Match still running after %v on a 10 kB key, want linear time", time.Since(start))
	}
}

// escape returns s as a pattern matching s alone.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

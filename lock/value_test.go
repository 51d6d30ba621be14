package lock

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lockscope/lockscope/event"
)

func TestValueRoundTrip(t *testing.T) {
	for _, owner := range []string{"app/host/1", "", "with|pipes|and\nnewline", "\xff\xfe", "<b>\"x\"</b>"} {
		v := Value{Token: "tok", Lease: "0123456789abcdef", Fence: 1795322054221694, Since: time.UnixMilli(1795322054220), Owner: owner}
		got, err := ParseValue(v.String())
		if err != nil {
			t.Fatalf("ParseValue(%q) = %v", v.String(), err)
		}
		if d := cmp.Diff(v, got); d != "" {
			t.Errorf("ParseValue(String()) (-want +got):\n%s", d)
		}
	}
}

func TestParseValueForeign(t *testing.T) {
	for _, s := range []string{"", "abc", "ls1|", "ls1|a|b|c", "ls1|a|b|x|1|o", "ls1||b|1|1|o", "ls2|a|b|1|1|o"} {
		if v, err := ParseValue(s); err == nil {
			t.Errorf("ParseValue(%q) = %+v, nil; want an error", s, v)
		}
	}
}

func TestNewHead(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		head := newHead()
		tok, id := headToken(head), headLease(head)
		if len(tok) != 22 || len(id) != 16 || strings.ContainsAny(tok+id, "|") || head != valueMagic+tok+"|"+id+"|" {
			t.Fatalf("newHead() = %q, %q, %q, want 22 and 16 characters without '|'", head, tok, id)
		}
		if seen[tok] || seen[id] {
			t.Fatalf("newHead() repeated %q/%q", tok, id)
		}
		seen[tok], seen[id] = true, true
	}
}

func TestRetryStrategies(t *testing.T) {
	if d, ok := NoRetry().Backoff(1); ok {
		t.Errorf("NoRetry().Backoff(1) = %v, true; want false", d)
	}
	if d, ok := LinearBackoff(7 * time.Millisecond).Backoff(100); !ok || d != 7*time.Millisecond {
		t.Errorf("LinearBackoff(7ms).Backoff(100) = %v, %v", d, ok)
	}
	e := ExponentialBackoff(10*time.Millisecond, 300*time.Millisecond)
	for n, hi := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 4: 80 * time.Millisecond, 6: 300 * time.Millisecond, 200: 300 * time.Millisecond} {
		for range 50 {
			d, ok := e.Backoff(n)
			if !ok || d < hi/2 || d > hi {
				t.Fatalf("ExponentialBackoff(10ms, 300ms).Backoff(%d) = %v, %v; want in [%v, %v]", n, d, ok, hi/2, hi)
			}
		}
	}
	l := LimitRetry(LinearBackoff(time.Millisecond), 2)
	for n, want := range map[int]bool{1: true, 2: true, 3: false} {
		if _, ok := l.Backoff(n); ok != want {
			t.Errorf("LimitRetry(_, 2).Backoff(%d) again = %v, want %v", n, ok, want)
		}
	}
	custom := RetryFunc(func(n int) (time.Duration, bool) { return time.Duration(n) * time.Millisecond, n < 3 })
	if d, ok := custom.Backoff(2); !ok || d != 2*time.Millisecond {
		t.Errorf("RetryFunc.Backoff(2) = %v, %v", d, ok)
	}
}

func TestNotObtainedErrorText(t *testing.T) {
	long := strings.Repeat("k", 10000)
	err := &NotObtainedError{Key: long, Holder: &Holder{Owner: "<b>x</b>", TTL: 1500 * time.Millisecond},
		Reason: "timeout", Attempts: 3, Wait: 2 * time.Second, Err: context.DeadlineExceeded}
	msg := err.Error()
	if len(msg) > 400 || !strings.Contains(msg, `held by "<b>x</b>" for 1.5s more`) || !strings.Contains(msg, "(10000 bytes)") {
		t.Errorf("Error() = %q, want a short message naming holder and TTL", msg)
	}
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(ErrNotObtained / DeadlineExceeded) false for %v", err)
	}
}

func TestHostileKeys(t *testing.T) {
	c, rdb, rec, p := newClient(t, "owner \"quoted\" <b>")
	ctx := context.Background()
	for _, k := range []string{
		`<script>alert(1)</script>`, `quote"s'and\backslash`, "new\nline\r\n", strings.Repeat("x", 10<<10),
		"\xff\xfe\xfd invalid utf-8", "/a/b?c=d%20&e#f", "{brace}", "}", "", "ls1|looks|like|a|value",
	} {
		key := p + k
		if k == "" {
			key = ""
		}
		l := mustObtain(t, c, key, time.Second, &ObtainOptions{Fencing: true})
		h, err := c.Inspect(ctx, key)
		if err != nil || h.Key != key || h.Owner != `owner "quoted" <b>` || h.Lease != l.ID() || h.Fence != l.Fence() {
			t.Errorf("Inspect(%.40q) = %+v, %v", key, h, err)
		}
		if _, _, err := c.Try(ctx, key, time.Second, nil); !errors.Is(err, ErrNotObtained) {
			t.Errorf("Try(%.40q) on held = %v", key, err)
		}
		if err := l.Refresh(ctx, 2*time.Second); err != nil {
			t.Errorf("Refresh(%.40q) = %v", key, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release(%.40q) = %v", key, err)
		}
		if n := rdb.Exists(ctx, key).Val(); n != 0 {
			t.Errorf("key %.40q still exists after Release", key)
		}
		rdb.Del(ctx, FenceKey(key))
	}
	if a, r := rec.Of(event.Acquired), rec.Of(event.Released); len(a) != 10 || len(r) != 10 || a[3].Key != p+strings.Repeat("x", 10<<10) || r[4].Key != p+"\xff\xfe\xfd invalid utf-8" {
		t.Errorf("events: %d acquired, %d released, want 10 each carrying the exact keys", len(a), len(r))
	}
}

// Other libraries' lock values are their secret tokens: ForeignOwner names
// the holder by library and fingerprint, never by the value.
func TestForeignOwnerHidesTheToken(t *testing.T) {
	for _, tc := range []struct{ value, kind string }{
		{"5f0c6e1aa7e211ef9c2b0242ac120002", "redis-py"},     // redis-py uuid1().hex
		{"9b1c3f0e2d4a5b6c7d8e9fa0b1c2d3e4", "node-redlock"}, // node-redlock randomBytes(16) hex
		{"q1Jx0m8ZbQ7yC4wXr2T9Uw==", "redsync"},
		{"Zk3vQ9bN2xT7Lp0sWm4RcA", "redislock"},
		{"Zk3vQ9bN2xT7Lp0sWm4RcAjob=42", "redislock"}, // token + metadata
		{"zkxvqybnfxtalpasqmyrcA", "redislock"},       // no digit, no upper case but the last: 2 % of tokens
		{"1", "foreign"},
		{"inventoryworkerreplica", "foreign"}, // 22 base64url letters, but a word
		{"InventoryWorkerReplica", "foreign"}, // two kinds of letters, but its last one has unused bits set
		{"q1Jx0m8ZbQ7yC4wXr2T9Uv==", "foreign"},
		{"5f0c6e1aa7e211ef9c2b0242ac12000", "foreign"},
		{"worker-7 pid 4242", "foreign"},
	} {
		got := ForeignOwner(tc.value)
		want := tc.kind + " " + Fingerprint(tc.value)[:8]
		if got != want {
			t.Errorf("ForeignOwner(%q) = %q, want %q", tc.value, got, want)
		}
		if len(tc.value) > 8 && strings.Contains(got, tc.value[:8]) {
			t.Errorf("ForeignOwner(%q) = %q shows the value", tc.value, got)
		}
	}
}

// ForeignKind on many tokens made as each library makes them (from a fixed
// seed, so the counts are exact): every redsync, redislock and redis-py
// token is named for its library. A random hex token of node-redlock is
// taken for a uuid1 only when its version and variant digits, and its
// timestamp, happen to fit: some 1 in 20 000. An older
// rule, wanting an upper case letter, a lower case letter and a digit in a
// redislock token, named 2 % of them "foreign".
func TestForeignKindOfManyTokens(t *testing.T) {
	rng := rand.New(rand.NewChaCha8([32]byte{26}))
	random16 := func() []byte {
		b := make([]byte, 16)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	// uuid1 as Python makes it: 100 ns since 1582-10-15, a 14-bit clock
	// sequence, a 48-bit node (random, multicast bit set, when no MAC).
	uuid1 := func(at time.Time) string {
		ts := uint64(at.UnixNano()/100) + 0x01B21DD213814000
		b := random16()
		binary.BigEndian.PutUint32(b[0:], uint32(ts))
		binary.BigEndian.PutUint16(b[4:], uint16(ts>>32))
		binary.BigEndian.PutUint16(b[6:], uint16(ts>>48)&0x0fff|0x1000)
		b[8] = b[8]&0x3f | 0x80
		b[10] |= 0x01
		return hex.EncodeToString(b)
	}
	count := map[string]map[string]int{}
	add := func(lib, kind string) {
		if count[lib] == nil {
			count[lib] = map[string]int{}
		}
		count[lib][kind]++
	}
	const n = 20_000
	for i := range n {
		add("redsync", ForeignKind(base64.StdEncoding.EncodeToString(random16())))
		add("redislock", ForeignKind(base64.RawURLEncoding.EncodeToString(random16())))
		add("redislock+metadata", ForeignKind(base64.RawURLEncoding.EncodeToString(random16())+"job-"+strconv.Itoa(i)))
		add("node-redlock", ForeignKind(hex.EncodeToString(random16())))
		add("redis-py", ForeignKind(uuid1(time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(time.Since(time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC)))))))))
	}
	// Redlock's random tokens that look like a uuid1 of the last years.
	got := count["node-redlock"]["redis-py"]
	if got > 5 {
		t.Errorf("%d of %d node-redlock tokens named redis-py, want at most 5", got, n)
	}
	delete(count["node-redlock"], "redis-py")
	count["node-redlock"]["node-redlock"] += got
	want := map[string]map[string]int{
		"redsync":            {"redsync": n},
		"redislock":          {"redislock": n},
		"redislock+metadata": {"redislock": n},
		"node-redlock":       {"node-redlock": n},
		"redis-py":           {"redis-py": n},
	}
	if diff := cmp.Diff(want, count); diff != "" {
		t.Errorf("ForeignKind of tokens by library (-want +got):\n%s", diff)
	}
}

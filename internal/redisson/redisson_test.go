package redisson

import (
	"testing"
)

func TestParse(t *testing.T) {
	const java, node = "6d2b8f4e-1c3a-4b5d-9e6f-7a8b9c0d1e2f", "7e3c9f5a-2d4b-4c6e-8f7a-8b9cad1e2f30"
	for _, c := range []struct {
		name   string
		fields map[string]string
		ok     bool
		owner  string
		kind   string
		desc   string
	}{
		{"RLock re-entered", map[string]string{java + ":42": "2"}, true, "redisson 6d2b8f4e:42", "lock", "redisson lock: 6d2b8f4e:42 ×2"},
		{"node-redisson thread", map[string]string{java + ":" + node: "1"}, true, "redisson 6d2b8f4e:7e3c9f5a", "lock", "redisson lock: 6d2b8f4e:7e3c9f5a ×1"},
		{"read lock", map[string]string{"mode": "read", java + ":1": "1", node + ":2": "1"}, true, "redisson readers", "read lock", "redisson read lock: 6d2b8f4e:1 ×1 7e3c9f5a:2 ×1"},
		{"write lock", map[string]string{"mode": "write", java + ":5:write": "1"}, true, "redisson 6d2b8f4e:5 (write)", "write lock", "redisson write lock: 6d2b8f4e:5 ×1"},
		{"writer that also reads", map[string]string{"mode": "write", java + ":5": "1", java + ":5:write": "1"}, true, "redisson 6d2b8f4e:5 (write)", "write lock", ""},
		{"session hash", map[string]string{"user": "42"}, false, "", "", ""},
		{"not a UUID", map[string]string{"6d2b8f4e:42": "1"}, false, "", "", ""},
		{"zero count", map[string]string{java + ":42": "0"}, false, "", "", ""},
		{"count not a number", map[string]string{java + ":42": "x"}, false, "", "", ""},
		{"mode only", map[string]string{"mode": "read"}, false, "", "", ""},
		{"unknown mode", map[string]string{"mode": "other", java + ":1": "1"}, false, "", "", ""},
		{"empty", map[string]string{}, false, "", "", ""},
	} {
		l, ok := Parse(c.fields)
		if ok != c.ok {
			t.Errorf("%s: Parse = %v, want %v", c.name, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		if got := l.Owner(); got != c.owner {
			t.Errorf("%s: Owner = %q, want %q", c.name, got, c.owner)
		}
		if got := l.Kind(); got != c.kind {
			t.Errorf("%s: Kind = %q, want %q", c.name, got, c.kind)
		}
		if got := l.Describe(); c.desc != "" && got != c.desc {
			t.Errorf("%s: Describe = %q, want %q", c.name, got, c.desc)
		}
	}
}

func TestCompanionNames(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{QueueKey("lock:a"), "redisson_lock_queue:{lock:a}"},
		{TimeoutKey("lock:a"), "redisson_lock_timeout:{lock:a}"},
		{Channel("lock:a"), "redisson_lock__channel:{lock:a}"},
		{RWChannel("lock:a"), "redisson_rwlock:{lock:a}"},
		// A name with a hash tag keeps it: the companion lives in its slot.
		{Channel("{app}:lock"), "redisson_lock__channel:{app}:lock"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// The content a forced release compares is read back as the fields it was
// made of, whatever they hold, and two different hashes never share it.
func FuzzCanonical(f *testing.F) {
	f.Add("6d2b8f4e-1c3a-4b5d-9e6f-7a8b9c0d1e2f:42", "1", "mode", "write")
	f.Add("a", "", "b", "c")
	f.Fuzz(func(t *testing.T, f1, v1, f2, v2 string) {
		for _, s := range []string{f1, v1, f2, v2} {
			for i := 0; i < len(s); i++ {
				if s[i] == '\n' {
					return // Redisson's fields and counts hold no newline
				}
			}
		}
		in := map[string]string{f1: v1, f2: v2}
		back := parseCanonical(Canonical(in))
		if len(back) != len(in) {
			t.Fatalf("parseCanonical(Canonical(%q)) = %q", in, back)
		}
		for k, v := range in {
			if back[k] != v {
				t.Fatalf("parseCanonical(Canonical(%q)) = %q", in, back)
			}
		}
		if Fingerprint(in) != Fingerprint(back) {
			t.Fatalf("fingerprint changed after a round trip of %q", in)
		}
	})
}

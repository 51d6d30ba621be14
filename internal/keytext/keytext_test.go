package keytext

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/url"
	"strings"
	"testing"
)

// hostile are keys an application may legally use.
var hostile = []string{
	"workflow:123", "a/b", "a b", "a?b#c", "a%2Fb", ".", "..", "../../etc/passwd",
	"<script>alert(1)</script>", "a\nb", "a\x00b", "\x1b[31mred", "bad\xff\xfe", "naïve/日本",
	"ls\u2028x", strings.Repeat("k", 10<<10), "",
}

func TestVisible(t *testing.T) {
	for _, c := range []struct {
		key, want string
		escaped   bool
	}{
		{"workflow:123", "workflow:123", false},
		{"<script>alert(1)</script>", "<script>alert(1)</script>", false}, // templ escapes HTML
		{"naïve/日本", "naïve/日本", false},
		{`a\b`, `a\b`, false},
		{"a\nb", `a\nb`, true},
		{"a\x00b\\", `a\x00b\\`, true},
		{"bad\xff\xfe", `bad\xff\xfe`, true},
		{"ls\u2028x", `ls\u2028x`, true},
		{"c1\u0085", `c1\u0085`, true},
		{"del\x7f", `del\x7f`, true},
	} {
		got, esc := Visible(c.key)
		if got != c.want || esc != c.escaped {
			t.Errorf("Visible(%q) = %q, %v, want %q, %v", c.key, got, esc, c.want, c.escaped)
		}
	}
}

func TestCut(t *testing.T) {
	long := strings.Repeat("日", 100) // 3 bytes each
	got := Cut(long, 80)
	if !strings.HasSuffix(got, "…") || len(got) > 80+len("…") {
		t.Errorf("Cut(300 bytes, 80) = %d bytes %q, want at most 80 bytes and an ellipsis", len(got), got)
	}
	if strings.ContainsRune(strings.TrimSuffix(got, "…"), '\uFFFD') {
		t.Errorf("Cut cut inside a rune: %q", got)
	}
	if got := Cut("short", 80); got != "short" {
		t.Errorf("Cut(%q) = %q, want it unchanged", "short", got)
	}
}

func TestPathSegmentRoundTrips(t *testing.T) {
	for _, key := range hostile {
		esc := PathSegment(key)
		if strings.ContainsAny(esc, "/?#. \n") {
			t.Errorf("PathSegment(%.40q) = %.60q, contains a character that is not safe in one path segment", key, esc)
		}
		if back, err := url.PathUnescape(esc); err != nil || back != key {
			t.Errorf("PathUnescape(PathSegment(%.40q)) = %.40q, %v; want the key back", key, back, err)
		}
	}
	if got, want := PathSegment("a/b?c.d"), "a%2Fb%3Fc%2Ed"; got != want {
		t.Errorf("PathSegment(a/b?c.d) = %q, want %q", got, want)
	}
}

func TestTerminal(t *testing.T) {
	tests := []struct {
		key  string
		max  int
		want string
	}{
		{"inventory:sku-1", 0, "inventory:sku-1"},
		{"workflow:<b>", 0, "workflow:<b>"},
		{"a b", 0, `"a b"`},
		{"k\n\x1b[31m", 0, `"k\n\x1b[31m"`},
		{"k\xff", 0, `"k\xff"`},
		{`say "hi"`, 0, `"say \"hi\""`},
		{strings.Repeat("x", 100), 10, "xxxxxxxxxx…(100 bytes)"},
		{"", 0, `""`},
		// A cut never splits a character...
		{"abc日本", 5, "abc…(9 bytes)"},
		{"a b日本", 5, `"a b"…(9 bytes)`},
		// ...and keeps the invalid bytes it shows. (The command line's copy
		// of this rule dropped every invalid byte before a cut: a long key
		// of binary bytes printed as "".)
		{strings.Repeat("\xff", 300), 4, `"\xff\xff\xff\xff"…(300 bytes)`},
		{"ab\xff日本", 5, `"ab\xff"…(9 bytes)`},
	}
	for _, tt := range tests {
		if got := Terminal(tt.key, tt.max); got != tt.want {
			t.Errorf("Terminal(%q, %d) = %s, want %s", tt.key, tt.max, got, tt.want)
		}
	}
}

func TestB64IfInvalid(t *testing.T) {
	if got := B64IfInvalid("naïve/日本"); got != "" {
		t.Errorf("B64IfInvalid(valid UTF-8) = %q, want \"\"", got)
	}
	key := "bad\xff\xfe"
	got := B64IfInvalid(key)
	if b, err := base64.StdEncoding.DecodeString(got); err != nil || string(b) != key {
		t.Errorf("B64IfInvalid(%q) = %q, decodes to %q, %v; want the exact bytes", key, got, b, err)
	}
}

// A JSON log replaces invalid bytes with U+FFFD: the audit line of a key
// that is not UTF-8 carries its bytes in key_b64.
func TestLogAttrsKeepBytesInJSONLogs(t *testing.T) {
	for _, key := range hostile {
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("forced release", LogAttrs("key", key)...)
		var line struct {
			Key    string `json:"key"`
			KeyB64 string `json:"key_b64"`
		}
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("log line %s: %v", buf.Bytes(), err)
		}
		got := line.Key
		if line.KeyB64 != "" {
			b, err := base64.StdEncoding.DecodeString(line.KeyB64)
			if err != nil {
				t.Fatalf("key_b64 %q: %v", line.KeyB64, err)
			}
			got = string(b)
		}
		if got != key {
			t.Errorf("JSON log of %.40q read back as %.40q", key, got)
		}
	}
	if got := LogAttrs("key", "plain"); len(got) != 2 {
		t.Errorf("LogAttrs(valid UTF-8) = %q, want the key alone", got)
	}
}

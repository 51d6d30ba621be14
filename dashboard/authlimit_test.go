package dashboard

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"
)

func TestAuthLimiterRefusesUntilTheWindowEnds(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	counted := 0
	l := newAuthLimiter(func() time.Time { return now }, slog.New(slog.NewTextHandler(io.Discard, nil)), func() { counted++ })
	for range authMaxFailures {
		l.failed("10.0.0.1", "admin", "/")
	}
	if _, ok := l.blocked("10.0.0.1"); ok {
		t.Fatalf("refused after %d failures, want refused only beyond them", authMaxFailures)
	}
	l.failed("10.0.0.1", "admin", "/")
	left, ok := l.blocked("10.0.0.1")
	if !ok || left != authWindow {
		t.Fatalf("blocked() = %v, %v after %d failures, want refused for the window", left, ok, authMaxFailures+1)
	}
	if _, ok := l.blocked("10.0.0.2"); ok {
		t.Error("another source is refused too")
	}
	now = now.Add(authWindow - time.Second)
	if left, ok := l.blocked("10.0.0.1"); !ok || left != time.Second {
		t.Errorf("blocked() = %v, %v one second before the window ends", left, ok)
	}
	now = now.Add(time.Second)
	if _, ok := l.blocked("10.0.0.1"); ok {
		t.Error("still refused after the window ended")
	}
	if counted != authMaxFailures+1 {
		t.Errorf("counted %d failures, want %d", counted, authMaxFailures+1)
	}
}

func TestAuthLimiterMemoryIsBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := newAuthLimiter(func() time.Time { return now }, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	for i := range 3 * authMaxSources {
		now = now.Add(time.Millisecond)
		l.failed(string(rune(i)), "u", "/")
	}
	if n := len(l.sources); n > authMaxSources {
		t.Errorf("%d sources tracked, want at most %d", n, authMaxSources)
	}
}

func TestHostCheck(t *testing.T) {
	c, err := newHostCheck([]string{"locks.example.com", "*.corp.example", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"locks.example.com":       true,
		"Locks.Example.Com.:443":  true,
		"a.b.corp.example:8080":   true,
		"corp.example":            false,
		"evilcorp.example":        false,
		"locks.example.com.evil":  false,
		"10.1.2.3:8080":           true,
		"[2001:db8::1]:80":        true,
		"localhost":               true,
		"rebind.attacker.example": false,
		"":                        false,
	} {
		if got := c.allows(host); got != want {
			t.Errorf("allows(%q) = %v, want %v", host, got, want)
		}
	}
	for _, bad := range []string{"", "a:b", "*foo", "http://x"} {
		if _, err := newHostCheck([]string{bad}); err == nil {
			t.Errorf("newHostCheck(%q) accepted", bad)
		}
	}
	if any, _ := newHostCheck(nil); !any.allows("whatever.example") {
		t.Error("no AllowedHosts should mean no check")
	}
}

func TestDefaultAllowedHosts(t *testing.T) {
	if got := DefaultAllowedHosts("127.0.0.1:8080"); !slices.Equal(got, []string{"localhost"}) {
		t.Errorf("loopback: %v, want [localhost]", got)
	}
	if got := DefaultAllowedHosts("locks.internal:8080"); !slices.Equal(got, []string{"localhost", "locks.internal"}) {
		t.Errorf("named: %v", got)
	}
	if got := DefaultAllowedHosts(":8080"); len(got) < 2 || got[0] != "localhost" {
		t.Errorf("every interface: %v, want localhost and this machine's name", got)
	}
}

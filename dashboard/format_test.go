package dashboard

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestFmtDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0"},
		{850 * time.Microsecond, "850µs"},
		{1500 * time.Microsecond, "1.5ms"},
		{12 * time.Millisecond, "12ms"},
		{999 * time.Millisecond, "999ms"},
		{1200 * time.Millisecond, "1.2s"},
		{42 * time.Second, "42s"},
		{3*time.Minute + 12*time.Second, "3m12s"},
		{2*time.Hour + 5*time.Minute, "2h05m"},
		{76 * time.Hour, "3d04h"},
		{-2 * time.Second, "-2s"},
	} {
		if got := fmtDuration(c.d); got != c.want {
			t.Errorf("fmtDuration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestFmtAgo(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, "never"},
		{now.Add(-300 * time.Millisecond), "just now"},
		{now.Add(-(3*time.Minute + 12*time.Second + 400*time.Millisecond)), "3m12s ago"},
		{now.Add(5 * time.Second), "in 5s"},
	} {
		if got := fmtAgo(now, c.t); got != c.want {
			t.Errorf("fmtAgo(%v) = %q, want %q", c.t, got, c.want)
		}
	}
}

func TestFmtNumbers(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{fmtCount(0), "0"},
		{fmtCount(999), "999"},
		{fmtCount(1000), "1,000"},
		{fmtCount(100000), "100,000"},
		{fmtCount(int64(-1234567)), "-1,234,567"},
		{fmtRate(0), "0"},
		{fmtRate(3.14159), "3.14"},
		{fmtRate(123.45), "123.5"},
		{fmtRate(12345), "12,345"},
		{fmtPercent(0), "0%"},
		{fmtPercent(0.034), "3.4%"},
		{fmtPercent(0.42), "42%"},
		{fmtBound(2500 * time.Millisecond), "2.5s"},
		{fmtBound(5 * time.Minute), "5m"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// Timeline lane labels keep both ends of a long owner, so owners that differ
// only at the end stay apart.
func TestElideMiddleKeepsOwnersApart(t *testing.T) {
	a, b := "inventory-service-eu-west-1/worker-12", "inventory-service-eu-west-1/worker-13"
	la, lb := elideMiddle(a, 24), elideMiddle(b, 24)
	if la == lb || utf8.RuneCountInString(la) != 24 || !strings.HasSuffix(la, "worker-12") || !strings.HasPrefix(la, "inventory") {
		t.Errorf("elideMiddle = %q, %q; want 24 runes each, both ends kept, told apart", la, lb)
	}
	if got := elideMiddle("inventory-svc/worker-2", 24); got != "inventory-svc/worker-2" {
		t.Errorf("a short owner was cut: %q", got)
	}
	if got := elideMiddle("ключ-ключ-ключ-ключ-ключ-ключ", 9); !utf8.ValidString(got) || utf8.RuneCountInString(got) != 9 {
		t.Errorf("elideMiddle cut inside a rune or to the wrong length: %q", got)
	}
}

package top

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/lockscope/lockscope/internal/keytext"
)

// text makes a string from an application (a key, an owner, a reason) safe
// to draw: control characters and invalid bytes become escapes, so an ESC
// in a key cannot repaint the terminal.
func text(s string) string {
	v, _ := keytext.Visible(s)
	return v
}

// dur formats a duration compactly: 850ms, 4.2s, 1m02s, 3h04m, 2d05h.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + dur(-d)
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < 10*time.Second:
		return strings.TrimSuffix(strconv.FormatFloat(d.Seconds(), 'f', 1, 64), ".0") + "s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ago is how long before now t was, "now" under a second.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < time.Second {
		return "now"
	}
	return dur(d.Truncate(time.Second)) + " ago"
}

// ttl is a TTL in seconds as the API sends it (-1: no expiry).
func ttl(s float64, noExpiry bool) string {
	if noExpiry || s < 0 {
		return "none"
	}
	if s == 0 {
		return "-"
	}
	return dur(secs(s))
}

// short is a fingerprint or lease id cut to its first n characters.
func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// fit cuts s to width columns (with "…") or pads it with spaces to width.
func fit(s string, width int, right bool) string {
	if width <= 0 {
		return ""
	}
	w := ansi.StringWidth(s)
	if w > width {
		return ansi.Truncate(s, width, "…")
	}
	pad := strings.Repeat(" ", width-w)
	if right {
		return pad + s
	}
	return s + pad
}

// cut cuts a line to width columns.
func cut(s string, width int) string {
	if ansi.StringWidth(s) <= width {
		return s
	}
	return ansi.Truncate(s, width, "…")
}

// plural is "1 waiter", "3 waiters".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

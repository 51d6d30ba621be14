package dashboard

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/lockscope/lockscope/collector/state"
)

// Human units for pages: operators read "3m12s ago" faster than a
// timestamp, and "1.2 s" faster than 1200000000.

// fmtDuration renders d with at most two units: 850µs, 12ms, 1.4s, 3m12s, 2h05m, 3d04h.
func fmtDuration(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDuration(-d)
	}
	switch {
	case d == 0:
		return "0"
	case d < time.Microsecond:
		return strconv.FormatInt(int64(d), 10) + "ns"
	case d < time.Millisecond:
		return strconv.FormatInt(int64(d/time.Microsecond), 10) + "µs"
	case d < 10*time.Millisecond:
		return trimFloat(float64(d)/float64(time.Millisecond), 1) + "ms"
	case d < time.Second:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	case d < 10*time.Second:
		return trimFloat(float64(d)/float64(time.Second), 2) + "s"
	case d < time.Minute:
		return trimFloat(float64(d)/float64(time.Second), 1) + "s"
	case d < time.Hour:
		m, s := int64(d/time.Minute), int64(d%time.Minute/time.Second)
		return strconv.FormatInt(m, 10) + "m" + pad2(s) + "s"
	case d < 24*time.Hour:
		h, m := int64(d/time.Hour), int64(d%time.Hour/time.Minute)
		return strconv.FormatInt(h, 10) + "h" + pad2(m) + "m"
	default:
		days, h := int64(d/(24*time.Hour)), int64(d%(24*time.Hour)/time.Hour)
		return strconv.FormatInt(days, 10) + "d" + pad2(h) + "h"
	}
}

// fmtAgo renders how long before now t was; the zero time is "never".
func fmtAgo(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < time.Second {
		if d < -time.Second {
			return "in " + fmtDuration(-d.Truncate(time.Second))
		}
		return "just now"
	}
	return fmtDuration(d.Truncate(time.Second)) + " ago"
}

// fmtBound renders a histogram bound compactly for axis labels: 1ms, 250ms, 2.5s, 5m.
func fmtBound(d time.Duration) string {
	switch {
	case d < time.Second:
		return trimFloat(float64(d)/float64(time.Millisecond), 1) + "ms"
	case d < time.Minute:
		return trimFloat(float64(d)/float64(time.Second), 1) + "s"
	default:
		return trimFloat(float64(d)/float64(time.Minute), 1) + "m"
	}
}

// fmtRate renders an event rate per second.
func fmtRate(r float64) string {
	switch {
	case r == 0:
		return "0"
	case r < 10:
		return trimFloat(r, 2)
	case r < 1000:
		return trimFloat(r, 1)
	default:
		return fmtCount(int64(math.Round(r)))
	}
}

// fmtPercent renders a 0..1 ratio as a percentage.
func fmtPercent(r float64) string {
	switch {
	case r <= 0:
		return "0%"
	case r < 0.1:
		return trimFloat(r*100, 1) + "%"
	default:
		return strconv.FormatFloat(math.Round(r*100), 'f', 0, 64) + "%"
	}
}

// fmtCount renders n with thousands separators: 100,000.
func fmtCount[T ~int | ~int64](n T) string {
	v := int64(n)
	if v < 0 {
		return "-" + fmtCount(-v)
	}
	s := strconv.FormatInt(v, 10)
	if len(s) <= 3 {
		return s
	}
	var b strings.Builder
	head := len(s) % 3
	b.WriteString(s[:head])
	for i := head; i < len(s); i += 3 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s[i : i+3])
	}
	return b.String()
}

// fmtAbs renders t as an absolute date and time with its zone (UTC), for
// the title of a relative time and the key page; "" for the zero time.
func fmtAbs(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 MST")
}

func fmtClock(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.Format("15:04:05.000")
}

func trimFloat(f float64, prec int) string {
	s := strconv.FormatFloat(f, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(s, "0")
		s = strings.TrimSuffix(s, ".")
	}
	return s
}

func pad2(n int64) string {
	if n < 10 {
		return "0" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

// elideMiddle shortens s to at most max runes by cutting its middle: owners
// and keys differ mostly at their ends (worker-2, worker-3), which stay.
func elideMiddle(s string, max int) string {
	r := []rune(s)
	if len(r) <= max || max < 3 {
		return s
	}
	head := (max - 1) / 2
	tail := max - 1 - head
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// fmtThreshold is a configured threshold as it was likely written: 30m,
// 2h, 1h30m, 20s.
func fmtThreshold(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// stuckThreshold says which stuck threshold applies to l's class and where
// it comes from: "2h (edit:*)" for the --stuck-after entry edit:*=2h,
// "5m (default)" for the plain --stuck-after.
func stuckThreshold(l state.LockInfo) string {
	if l.StuckAfter <= 0 {
		return ""
	}
	from := "default"
	if l.StuckRule != "" {
		from = l.StuckRule
	}
	return fmtThreshold(l.StuckAfter) + " (" + from + ")"
}

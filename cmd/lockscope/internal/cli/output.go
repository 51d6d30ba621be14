package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/internal/lockjson"
	"github.com/lockscope/lockscope/lock"
)

// The operator commands' output: a holder as text (printHolder, and the
// table of locks) and as JSON (holderJSON). Keys and owners reach the
// terminal through keytext.Terminal only.

// holderJSON is a lock holder as the operator commands print it with
// --json: the dashboard API's holder (lockjson.Holder) with the key it
// holds, how long it has held it and, for locks, the callers waiting.
type holderJSON struct {
	Key    string `json:"key"`
	KeyB64 string `json:"key_b64,omitempty"` // set when key is not valid UTF-8, which JSON cannot carry
	lockjson.Holder
	HeldFor float64 `json:"held_for_seconds,omitempty"`
	Waiters *int    `json:"waiters,omitempty"` // callers waiting for it now (absent: the stream could not be read)
}

func toJSON(h *lock.Holder, now time.Time) holderJSON {
	j := holderJSON{Key: h.Key, KeyB64: keytext.B64IfInvalid(h.Key), Holder: lockjson.NewHolder(h)}
	if !h.Since.IsZero() {
		j.HeldFor = now.Sub(h.Since).Round(time.Millisecond).Seconds()
	}
	return j
}

func formatTTL(d time.Duration) string {
	if d < 0 {
		return "NO EXPIRY"
	}
	return d.Round(time.Millisecond).String()
}

func formatHeld(h *lock.Holder, now time.Time) string {
	if h.Since.IsZero() {
		return "-"
	}
	return now.Sub(h.Since).Round(time.Millisecond).String()
}

// printHolder writes h as the aligned lines inspect and release show.
func printHolder(w io.Writer, h *lock.Holder, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "key:\t%s\n", keytext.Terminal(h.Key, 0))
	if h.Foreign {
		fmt.Fprintf(tw, "holder:\t(foreign) %s\n", keytext.Terminal(h.Owner, 0))
	} else {
		fmt.Fprintf(tw, "holder:\t%s\n", keytext.Terminal(h.Owner, 0))
		fmt.Fprintf(tw, "lease:\t%s\n", h.Lease)
		fmt.Fprintf(tw, "held for:\t%s (since %s)\n", formatHeld(h, now), h.Since.UTC().Format(time.RFC3339Nano))
	}
	if h.Fence > 0 {
		fmt.Fprintf(tw, "fence:\t%d\n", h.Fence)
	}
	fmt.Fprintf(tw, "ttl:\t%s\n", formatTTL(h.TTL))
	if h.Degraded {
		fmt.Fprintf(tw, "degraded:\tprocess-local lock (Redis was unreachable)\n")
	}
	fmt.Fprintf(tw, "fingerprint:\t%s\n", h.Fingerprint)
	tw.Flush()
}

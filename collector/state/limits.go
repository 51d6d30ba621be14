package state

import (
	"unicode/utf8"

	"github.com/lockscope/lockscope/event"
)

// What the state keeps of an event's strings. Anyone who may XADD to the
// stream (every application's Redis user) chooses them, up to the 64 KiB
// the wire allows (event.MaxStringLen): kept whole, a few thousand keys of
// 64 KiB or events with 512-byte owners took serve past half a gigabyte.
// Each cut is counted (Totals.Cut, lockscope_event_fields_cut_total).
const (
	// MaxKeyBytes is the longest key tracked. A longer key is not cut (a
	// cut key would name another Redis key, which a forced release would
	// then delete): its events are skipped.
	MaxKeyBytes = 512
	// MaxTextBytes is what is kept of an owner, lease, holder or operator
	// name: more than any of them needs.
	MaxTextBytes = 256
	// MaxReasonBytes is what is kept of a reason: a forced release's
	// (the dashboard takes 500 bytes), or the leases a waiting call holds.
	MaxReasonBytes = 512
)

// CutFields name the fields whose cuts Totals.Cut counts, in its order.
var CutFields = [...]string{"key", "owner", "lease", "reason", "holder", "by"}

const (
	cutKey = iota
	cutOwner
	cutLease
	cutReason
	cutHolder
	cutBy
)

// clip returns e, or a copy of e with its long strings cut, counting the
// cuts; ok is false when e's key is too long to track.
func (a *Aggregator) clip(e *event.Event) (_ *event.Event, ok bool) {
	if len(e.Key) > MaxKeyBytes {
		a.countCut(cutKey)
		return e, false
	}
	if len(e.Owner) <= MaxTextBytes && len(e.Lease) <= MaxTextBytes && len(e.Reason) <= MaxReasonBytes &&
		len(e.Holder) <= MaxTextBytes && len(e.By) <= MaxTextBytes {
		return e, true
	}
	c := *e
	for _, f := range [...]struct {
		s   *string
		max int
		i   int
	}{{&c.Owner, MaxTextBytes, cutOwner}, {&c.Lease, MaxTextBytes, cutLease}, {&c.Reason, MaxReasonBytes, cutReason},
		{&c.Holder, MaxTextBytes, cutHolder}, {&c.By, MaxTextBytes, cutBy}} {
		if len(*f.s) > f.max {
			*f.s = cutString(*f.s, f.max)
			a.countCut(f.i)
		}
	}
	return &c, true
}

// cutString returns s cut to at most n bytes, at the start of a UTF-8
// sequence when s is text.
func cutString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i]
		}
	}
	return s[:n]
}

func (a *Aggregator) countCut(field int) {
	if !a.muted {
		a.tot.Cut[field].Inc()
	}
}

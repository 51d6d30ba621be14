// Package event is the wire schema shared by lockscope's emitters (the lock
// library) and its collector: event types, encoding, decoding and versioning.
//
// Two entry shapes travel on the stream (see docs/events.md):
//
//   - a single event as plain field/value pairs, so any language can emit one
//     with one XADD:  XADD lockscope:events * v 1 type acquired key k owner o ...
//   - a packed batch (what the Go emitter sends): fields "v", "n" and "batch",
//     where batch is a compact binary encoding of n events.
//
// The package depends on the standard library only.
package event

import (
	"strings"
	"time"
)

// Version is the schema version this package writes and the highest it reads.
const Version = 1

// DefaultStream is the default Redis stream key events are written to.
const DefaultStream = "lockscope:events"

// Type is the kind of lifecycle step an event records.
type Type uint8

// Event types. The zero value is invalid so that a missing type is detected.
const (
	TypeInvalid Type = iota
	Acquired         // the lock was obtained (wait, attempts)
	Failed           // an obtain gave up: reason timeout, canceled, error or held
	Released         // the holder released the lock (hold)
	Renewed          // the holder extended the TTL
	RenewFailed      // a renewal attempt failed (reason)
	Lost             // the holder found its lock gone or owned by another
	Expired          // the TTL lapsed while held (collector or keyspace notification)
	Forced           // an operator force-released the lock
	Dropped          // an emitter reports how many events it had to drop (count)
	Waiting          // an obtain found the lock held and will retry (holder, wait budget, leases held)
	Requested        // an operator asked the holder to release (by, reason, grace in Wait, listeners reached in Count)
	// FenceRejected: a resource's fence guard refused a write carrying a
	// stale fence (fence; reason: the resource).
	FenceRejected
	numTypes
)

var typeNames = [...]string{
	TypeInvalid:   "invalid",
	Acquired:      "acquired",
	Failed:        "failed",
	Released:      "released",
	Renewed:       "renewed",
	RenewFailed:   "renew_failed",
	Lost:          "lost",
	Expired:       "expired",
	Forced:        "forced",
	Dropped:       "dropped",
	Waiting:       "waiting",
	Requested:     "requested",
	FenceRejected: "fence_rejected",
}

// Types lists every valid type in wire order.
func Types() []Type {
	out := make([]Type, 0, numTypes-1)
	for t := Acquired; t < numTypes; t++ {
		out = append(out, t)
	}
	return out
}

// String returns the wire name of t ("acquired", "renew_failed", ...).
func (t Type) String() string {
	if t < numTypes {
		return typeNames[t]
	}
	return "invalid"
}

// Valid reports whether t is a known event type.
func (t Type) Valid() bool { return t > TypeInvalid && t < numTypes }

// ParseType returns the Type named s, or TypeInvalid.
func ParseType(s string) Type {
	for t := Acquired; t < numTypes; t++ {
		if typeNames[t] == s {
			return t
		}
	}
	return TypeInvalid
}

// Failure and loss reasons used by the Go library. Other emitters may send
// other strings; the collector maps unknown failure reasons to "error".
const (
	ReasonTimeout  = "timeout"  // Failed: the context deadline passed while waiting
	ReasonCanceled = "canceled" // Failed: the context was canceled while waiting
	ReasonError    = "error"    // Failed, RenewFailed: Redis or network error
	ReasonHeld     = "held"     // Failed: a single try found the lock held
	ReasonNotOwner = "not_owner"
	ReasonMaxHold  = "max_hold" // Released/Lost: auto-renewal stopped at the maximum hold
)

// Event is one lock lifecycle step. Durations are carried with nanosecond
// precision except TTL, which travels in milliseconds.
type Event struct {
	Type     Type
	Key      string        // the lock key, arbitrary bytes
	Owner    string        // who: app/host/pid or a name the app sets; for Forced, the previous holder; for Requested, the holder asked
	Lease    string        // stable for one hold, never the secret token; Waiting: the lease the call will hold if it acquires
	TS       int64         // unix nanoseconds when the step happened
	Wait     time.Duration // Acquired, Failed: time spent obtaining; Waiting: the most it will wait (0: no deadline); Requested: the grace the operator gives before it may force (0: none said)
	Hold     time.Duration // Released, Lost, Expired, Forced: time the lock was held
	TTL      time.Duration // Acquired, Renewed: the TTL set (wire: ms)
	Attempts int           // Acquired, Failed: tries made
	Fence    int64         // fencing token when fencing is on, else 0 (FenceRejected: the refused write's)
	Reason   string        // Failed, RenewFailed, Lost, Forced, Requested: why; Waiting, Acquired: the leases the call already holds (HeldLeases)
	Count    int64         // Dropped: how many events were dropped; Requested: how many listeners the request reached (0: nobody heard it)
	Holder   string        // Failed, Waiting: who held the lock (owner) when we gave up or began to wait
	By       string        // Forced: the operator who released it; Requested: the operator who asked
	Degraded bool          // the lock was a process-local fallback, Redis unreachable
	Passive  bool          // seen through keyspace notifications, not emitted by a library

	// Optional fields added in schema version 1 without a version change:
	// single-event entries carry them as extra fields, packed entries in an
	// extension field that older collectors ignore (see Ext, docs/events.md).

	TraceID  TraceID       // the caller's OpenTelemetry trace when the step happened, if any
	SpanID   SpanID        // the caller's span, with TraceID
	Headroom time.Duration // Renewed: the TTL that was left when the renewal landed (0: unknown)
}

// HasExt reports whether e carries any optional field that a packed entry
// keeps in its extension (see AppendExt).
func (e *Event) HasExt() bool {
	return e.TraceID.IsValid() || e.SpanID.IsValid() || e.Headroom != 0
}

// HeldLeases returns the leases a Waiting or Acquired event's call already
// holds (its Reason, comma-separated lease ids): the wait-for graph's edges
// and the lock-order graph's.
func (e *Event) HeldLeases() []string {
	if (e.Type != Waiting && e.Type != Acquired) || e.Reason == "" {
		return nil
	}
	return strings.Split(e.Reason, ",")
}

// JoinLeases is the Reason of a Waiting or Acquired event whose call holds
// leases; "" for none, without allocating.
func JoinLeases(leases []string) string { return strings.Join(leases, ",") }

// Time returns TS as a time.Time.
func (e *Event) Time() time.Time { return time.Unix(0, e.TS) }

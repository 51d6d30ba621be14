package lock

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Sentinel errors, tested with errors.Is.
var (
	// ErrNotObtained: the lock could not be obtained (held by another owner,
	// the wait ran out, or Redis failed). The error returned is a
	// *NotObtainedError that says who holds the lock and why the caller gave up.
	ErrNotObtained = errors.New("lock: not obtained")
	// ErrNotHeld: the key is not held by the caller (or by anyone, for Inspect
	// and ForceRelease).
	ErrNotHeld = errors.New("lock: not held")
	// ErrLost: a lease found that its lock expired, was deleted or overwritten,
	// or reached its maximum hold.
	ErrLost = errors.New("lock: lost")
	// ErrOwnerChanged: ForceRelease was given the fingerprint of a value the key
	// no longer holds; nothing was changed.
	ErrOwnerChanged = errors.New("lock: owner changed")
	// ErrAmbiguous: ForceRelease was asked to release a holder whose value
	// cannot tell it from a successor that wrote the same value (any value
	// but a known library's random token: Holder.Ambiguous), without an
	// expiry to tell them apart either; nothing was changed. Quote Fingerprint+"@any" to release whoever holds it.
	ErrAmbiguous = errors.New("lock: holder cannot be told apart from a successor with the same value")
)

// NotObtainedError is the error Obtain, Try and Do return when the lock was
// not obtained. It matches ErrNotObtained and, when the cause was a context or
// a Redis error, that cause too.
type NotObtainedError struct {
	Key string
	// Holder is who held the lock at the last attempt; nil if unknown. Its
	// TTL is read by a first attempt and when the caller gives up with time
	// left (an extra round trip on those paths only); after a wait cut
	// short by the context it is 0, not known: retries do not read it.
	Holder   *Holder
	Reason   string        // event.ReasonHeld, ReasonTimeout, ReasonCanceled or ReasonError
	Attempts int           // attempts made
	Wait     time.Duration // time spent trying
	Err      error         // the context or Redis error behind Reason; nil for held
}

func (e *NotObtainedError) Error() string {
	b := make([]byte, 0, 128)
	b = append(b, "lock: not obtained: "...)
	b = appendQuoted(b, e.Key)
	if h := e.Holder; h != nil {
		b = append(b, " held by "...)
		b = appendQuoted(b, h.Owner)
		if h.TTL > 0 {
			b = append(b, " for "...)
			b = append(b, h.TTL.Round(time.Millisecond).String()...)
			b = append(b, " more"...)
		} else if h.TTL == -1 {
			b = append(b, " without expiry"...)
		}
		if h.Degraded {
			b = append(b, " (process-local)"...)
		}
	}
	b = append(b, " ("...)
	b = append(b, e.Reason...)
	b = append(b, " after "...)
	b = strconv.AppendInt(b, int64(e.Attempts), 10)
	if e.Attempts == 1 {
		b = append(b, " attempt in "...)
	} else {
		b = append(b, " attempts in "...)
	}
	b = append(b, e.Wait.Round(time.Microsecond).String()...)
	b = append(b, ')')
	if e.Err != nil {
		b = append(b, ": "...)
		b = append(b, e.Err.Error()...)
	}
	return string(b)
}

// Unwrap lets errors.Is match ErrNotObtained and the cause.
func (e *NotObtainedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrNotObtained}
	}
	return []error{ErrNotObtained, e.Err}
}

// lostError is what a lease's Err, Refresh and Do return after a loss: it
// matches ErrLost and says why.
type lostError struct{ reason string }

func (e *lostError) Error() string        { return "lock: lost (" + e.reason + ")" }
func (e *lostError) Is(target error) bool { return target == ErrLost }

// appendQuoted quotes a key or owner for an error message; keys are arbitrary
// bytes and may be 10 kB long, so long ones are cut.
func appendQuoted(b []byte, s string) []byte {
	const max = 200
	if len(s) > max {
		return fmt.Appendf(b, "%q...(%d bytes)", s[:max], len(s))
	}
	return strconv.AppendQuote(b, s)
}

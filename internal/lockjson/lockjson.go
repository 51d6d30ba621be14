// Package lockjson is the JSON shape of a lock's holder as Redis has it now,
// the one the dashboard's API (/api/v1/locks/{key}: "redis_holder", and a
// release's "previous" and "current") and the operator commands
// (`lockscope locks --json`, `lockscope inspect --json`) both print, so a
// script reads either the same way.
//
// Conventions, as in the rest of the API: durations are seconds as floats,
// times RFC 3339 in UTC and omitted when unknown, and a string that is not
// valid UTF-8 also travels as base64 in "<field>_b64" (keytext.B64IfInvalid).
package lockjson

import (
	"time"

	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/lock"
)

// Holder is a lock's current holder. A foreign lock (taken by another
// library) is named by its library and value fingerprint; its raw value is
// that library's secret token, present only when Reveal was called.
type Holder struct {
	Owner       string     `json:"owner"`
	OwnerB64    string     `json:"owner_b64,omitempty"`
	Lease       string     `json:"lease,omitempty"`
	Fence       int64      `json:"fence,omitempty"`
	TTL         float64    `json:"ttl_seconds"` // -1: no expiry
	NoExpiry    bool       `json:"no_expiry,omitempty"`
	Since       *time.Time `json:"since,omitempty"`
	Fingerprint string     `json:"fingerprint,omitempty"` // operators only on the dashboard's API
	Foreign     bool       `json:"foreign,omitempty"`
	Degraded    bool       `json:"degraded,omitempty"` // a process-local lock taken while Redis was unreachable
	Value       *string    `json:"value,omitempty"`
	ValueB64    string     `json:"value_b64,omitempty"`
}

// NewHolder is h in its JSON shape, without its value.
func NewHolder(h *lock.Holder) Holder {
	j := Holder{
		Owner: h.Owner, OwnerB64: keytext.B64IfInvalid(h.Owner), Lease: h.Lease, Fence: h.Fence, TTL: h.TTL.Seconds(),
		Since: Time(h.Since), Fingerprint: h.Fingerprint, Foreign: h.Foreign, Degraded: h.Degraded,
	}
	if h.TTL < 0 { // no expiry: -1, not the -1ns the TTL carries
		j.TTL, j.NoExpiry = -1, true
	}
	return j
}

// Reveal adds a foreign lock's raw value (another library's secret token):
// only for an operator who asked for it. A lockscope lock's value is
// nothing a reader needs, and stays out.
func (j *Holder) Reveal(h *lock.Holder) {
	if !h.Foreign {
		return
	}
	v := h.Value
	j.Value, j.ValueB64 = &v, keytext.B64IfInvalid(v)
}

// Time is t in UTC, or nil (omitted) for the zero time.
func Time(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

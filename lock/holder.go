package lock

import (
	"crypto/sha1"
	"encoding/hex"
	"time"
)

// Holder describes who holds a lock, read from Redis.
type Holder struct {
	Key, Owner, Lease string
	Fence             int64
	TTL               time.Duration // remaining, from PTTL; -1 if the key has no expiry
	Since             time.Time     // acquisition time (zero for foreign values)
	Fingerprint       string        // hex sha1 of the stored value (what ForceRelease checks)
	Foreign           bool          // value not written by lockscope (other library): Owner holds the raw value
	Degraded          bool          // a process-local lock taken while Redis was unreachable
}

// newHolder builds a Holder from a raw value and its PTTL in milliseconds.
func newHolder(key, value string, pttl int64) *Holder {
	h := &Holder{Key: key, Fingerprint: Fingerprint(value)}
	if pttl >= 0 {
		h.TTL = time.Duration(pttl) * time.Millisecond
	} else {
		h.TTL = -1
	}
	if v, err := ParseValue(value); err == nil {
		h.Owner, h.Lease, h.Fence, h.Since = v.Owner, v.Lease, v.Fence, v.Since
	} else {
		h.Owner, h.Foreign = value, true
	}
	return h
}

// Fingerprint returns the hex sha1 of a lock value, as Holder.Fingerprint and
// Redis's redis.sha1hex compute it.
func Fingerprint(value string) string {
	sum := sha1.Sum([]byte(value))
	return hex.EncodeToString(sum[:])
}

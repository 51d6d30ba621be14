package lock

import (
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// Holder describes who holds a lock, read from Redis.
type Holder struct {
	Key, Owner, Lease string
	Fence             int64
	TTL               time.Duration // remaining, from PTTL; -1 if the key has no expiry, 0 if not known (see NotObtainedError)
	Since             time.Time     // acquisition time (zero for foreign values)
	Fingerprint       string        // hex sha1 of the stored value (what ForceRelease checks)
	Foreign           bool          // value not written by lockscope (other library): Owner is ForeignOwner(Value)
	Degraded          bool          // a process-local lock taken while Redis was unreachable
	// Value is the raw stored value of a foreign lock. Other libraries
	// (redis-py, node-redlock, redsync, redislock) store a random token
	// there that extends or releases the lock through their own API:
	// it is a secret, shown only to operators who ask for it.
	Value string
	// Ambiguous: a foreign value that cannot tell its holder from a
	// successor writing the same value (a constant such as "1" or "locked":
	// shorter than 16 bytes, or fewer than 10 distinct bytes, and not a
	// known library's random token). Its Fingerprint then carries the key's
	// expiry ("<sha1>@<PEXPIRETIME ms>") when it has one; see ForceRelease.
	Ambiguous bool
	// ExpireAt is the key's absolute expiry (PEXPIRETIME, unix ms); 0 when
	// unknown, -1 without expiry.
	ExpireAt int64
}

// newHolder builds a Holder from a raw value, its PTTL in milliseconds and
// its PEXPIRETIME (0: unknown).
func newHolder(key, value string, pttl, expireAt int64) *Holder {
	h := &Holder{Key: key, Fingerprint: Fingerprint(value), ExpireAt: expireAt}
	if pttl >= 0 {
		h.TTL = time.Duration(pttl) * time.Millisecond
	} else {
		h.TTL = -1
	}
	if v, err := ParseValue(value); err == nil {
		h.Owner, h.Lease, h.Fence, h.Since = v.Owner, v.Lease, v.Fence, v.Since
	} else {
		h.Owner, h.Foreign, h.Value = ForeignOwner(value), true, value
		h.Ambiguous = ambiguous(value)
		if h.Ambiguous && expireAt > 0 {
			h.Fingerprint += "@" + strconv.FormatInt(expireAt, 10)
		}
	}
	return h
}

// ambiguous reports whether a foreign value may well be written alike by
// the next holder: not a known library's random token, and short or made of
// few distinct bytes.
func ambiguous(v string) bool {
	if foreignKind(v) != "foreign" {
		return false
	}
	if len(v) < 16 {
		return true
	}
	var seen [256]bool
	n := 0
	for i := 0; i < len(v) && n < 10; i++ {
		if !seen[v[i]] {
			seen[v[i]], n = true, n+1
		}
	}
	return n < 10
}

// Fingerprint returns the hex sha1 of a lock value, as Holder.Fingerprint and
// Redis's redis.sha1hex compute it.
func Fingerprint(value string) string {
	sum := sha1.Sum([]byte(value))
	return hex.EncodeToString(sum[:])
}

// ForeignOwner names the holder of a lock taken by another library without
// revealing its value: the library when the value's shape tells it, and the
// first 8 hex digits of the value's Fingerprint ("redsync 3f2a9c1b"). The
// value itself is often the lock's secret token. The name is stable (one
// holder, one name) and matches the fingerprint a forced release quotes.
//
// The library's own lease ids are no capability (a Lease cannot be made from
// an id: release and refresh need the Lease the Obtain returned), so they are
// shown as they are.
func ForeignOwner(value string) string {
	return foreignKind(value) + " " + Fingerprint(value)[:8]
}

// foreignKind recognises the token shapes of the common lock libraries.
func foreignKind(v string) string {
	switch {
	case len(v) == 32 && isHex(v):
		// redis-py (uuid1().hex) and node-redlock 5 (16 random bytes, hex)
		return "redis-py/redlock"
	case len(v) == 24 && strings.HasSuffix(v, "==") && decodes(base64.StdEncoding, v, 16):
		return "redsync" // base64 of 16 random bytes
	case len(v) >= 22 && decodes(base64.RawURLEncoding, v[:22], 16) && mixed(v[:22]):
		return "redislock" // base64url of 16 random bytes, then the caller's metadata
	}
	return "foreign"
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func decodes(enc *base64.Encoding, s string, n int) bool {
	b, err := enc.DecodeString(s)
	return err == nil && len(b) == n
}

// mixed reports whether s has an upper case letter, a lower case letter and a
// digit, as random base64 of 16 bytes almost always has and words seldom do.
func mixed(s string) bool {
	var up, low, dig bool
	for i := 0; i < len(s); i++ {
		c := s[i]
		up = up || 'A' <= c && c <= 'Z'
		low = low || 'a' <= c && c <= 'z'
		dig = dig || '0' <= c && c <= '9'
	}
	return up && low && dig
}

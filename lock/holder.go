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
	// Ambiguous: a foreign value that may not tell its holder from a
	// successor writing the same value: anything but a known library's
	// random token, which is drawn anew for every acquisition. A constant
	// ("1", "locked") is written alike by every holder, and so is a value
	// that names a process ("worker-7.prod.example.com:4242") by the same
	// process's next acquisition. Its Fingerprint then carries the key's
	// expiry ("<sha1>@<PEXPIRETIME ms>") when it has one; see ForceRelease.
	Ambiguous bool
	// ExpireAt is the key's absolute expiry (PEXPIRETIME, unix ms); 0 when
	// unknown, -1 without expiry.
	ExpireAt int64
}

// NeedsAnyHolder reports whether ForceRelease can release h only when told
// to release whoever holds the key (Fingerprint+"@any"): an ambiguous value
// without an expiry in its fingerprint to tell h from a successor.
func (h *Holder) NeedsAnyHolder() bool {
	return h.Ambiguous && !strings.Contains(h.Fingerprint, "@")
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

// ambiguous reports whether a foreign value may be written alike by the
// next holder: any value but a known library's random token. Its length
// and variety tell nothing: "worker-7.prod.example.com:4242" has 30 bytes,
// 20 of them distinct, and is the value of every lock its process takes.
func ambiguous(v string) bool {
	return ForeignKind(v) == ""
}

// Fingerprint returns the hex sha1 of a lock value, as Holder.Fingerprint and
// Redis's redis.sha1hex compute it.
func Fingerprint(value string) string {
	sum := sha1.Sum([]byte(value))
	return hex.EncodeToString(sum[:])
}

// ForeignOwner names the holder of a lock taken by another library without
// revealing its value: the library when the value's shape tells it (see
// ForeignKind), else "foreign", and the first 8 hex digits of the value's
// Fingerprint ("redsync 3f2a9c1b"). The value itself is often the lock's
// secret token. The name is stable (one holder, one name) and matches the
// fingerprint a forced release quotes.
//
// The library's own lease ids are no capability (a Lease cannot be made from
// an id: release and refresh need the Lease the Obtain returned), so they are
// shown as they are.
func ForeignOwner(value string) string {
	kind := ForeignKind(value)
	if kind == "" {
		kind = "foreign"
	}
	return kind + " " + Fingerprint(value)[:8]
}

// ForeignKind names the library whose lock token value is, by its shape, or
// returns "" when no known library writes values of that shape:
//
//   - "redis-py": uuid1().hex, 32 lowercase hex digits whose version digit
//     is 1, variant bits 10, and timestamp from 2015 (redis-py's Lock has
//     used uuid1 since 2014) to a day from now;
//   - "node-redlock": randomBytes(16).toString("hex"), 32 lowercase hex
//     digits (any other 32 hex digits: a random one looks like a uuid1 of
//     those years once in some 20 000);
//   - "redsync": base64 of 16 random bytes, 24 characters ending "==";
//   - "redislock": base64url (no padding) of 16 random bytes, 22
//     characters, then the caller's metadata if any.
//
// Base64 of 16 bytes leaves 4 bits of its 22nd character unused, and the
// encoders set them to zero: it is one of A, Q, g, w. A value that decodes
// with those bits set, or made of one kind of character only (letters of
// one case, or digits: words, numbers), is no such token.
func ForeignKind(v string) string {
	switch {
	case len(v) == 32 && isHex(v):
		if uuid1(v) {
			return "redis-py"
		}
		return "node-redlock"
	case len(v) == 24 && strings.HasSuffix(v, "==") && token16(base64.StdEncoding, v):
		return "redsync"
	case len(v) >= 22 && token16(base64.RawURLEncoding, v[:22]):
		return "redislock"
	}
	return ""
}

// uuid1 reports whether 32 hex digits are a version 1 UUID of RFC 4122 with
// a timestamp from 2015 to a day from now.
func uuid1(v string) bool {
	if v[12] != '1' || strings.IndexByte("89ab", v[16]) < 0 {
		return false
	}
	// time_hi (3 digits after the version), time_mid, time_low: 100 ns
	// since 1582-10-15.
	t, err := strconv.ParseUint(v[13:16]+v[8:12]+v[0:8], 16, 64)
	if err != nil {
		return false
	}
	const epoch = 0x01B21DD213814000 // 1970 in 100 ns since 1582-10-15
	const y2015 = epoch + 1420070400*10_000_000
	return t >= y2015 && t < epoch+uint64(time.Now().Add(24*time.Hour).UnixNano()/100)
}

// token16 reports whether s is enc's encoding of 16 bytes, with the unused
// bits zero, and of more than one kind of character.
func token16(enc *base64.Encoding, s string) bool {
	b, err := enc.Strict().DecodeString(s)
	return err == nil && len(b) == 16 && mixed(s)
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

// mixed reports whether s has characters of at least two of the classes
// upper case letter, lower case letter, digit, other: random base64 of 16
// bytes has them all but for one chance in thousands (no digit: 2 %, which
// an older rule requiring all three named "foreign"), words seldom do.
func mixed(s string) bool {
	var up, low, dig, other bool
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z':
			up = true
		case 'a' <= c && c <= 'z':
			low = true
		case '0' <= c && c <= '9':
			dig = true
		default:
			other = true
		}
	}
	n := 0
	for _, b := range [...]bool{up, low, dig, other} {
		if b {
			n++
		}
	}
	return n >= 2
}

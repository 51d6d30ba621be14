package lock

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// valueMagic starts every value this package writes; the version lets a later
// format coexist with old holders.
const valueMagic = "ls1|"

// Value is the content of a lock key written by this package:
//
//	ls1|<token>|<lease>|<fence>|<since>|<owner>
//
// token is 22 random base64url characters known only to the holder; lease is
// the public lease id (16 hex digits) that events carry; fence is the fencing
// token (0 without fencing); since is the acquisition time in Unix
// milliseconds; owner, last so it may contain any byte, is the holder's
// identity. The value is written atomically with the lock, so who holds a
// lock is answerable from Redis alone.
type Value struct {
	Token string
	Lease string
	Fence int64
	Since time.Time
	Owner string
}

var errForeign = errors.New("lock: value not written by lockscope")

// ParseValue parses a lock value written by this package. It returns an error
// for values written by other libraries (redislock, redsync, ...).
func ParseValue(s string) (Value, error) {
	rest, ok := strings.CutPrefix(s, valueMagic)
	if !ok {
		return Value{}, errForeign
	}
	var f [4]string
	for i := range f {
		var found bool
		f[i], rest, found = strings.Cut(rest, "|")
		if !found {
			return Value{}, errForeign
		}
	}
	fence, err1 := strconv.ParseInt(f[2], 10, 64)
	since, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || f[0] == "" || f[1] == "" {
		return Value{}, errForeign
	}
	return Value{Token: f[0], Lease: f[1], Fence: fence, Since: time.UnixMilli(since), Owner: rest}, nil
}

// String encodes v in the format ParseValue reads.
func (v Value) String() string {
	return v.head() + strconv.FormatInt(v.Fence, 10) + v.tail()
}

// head is the part of the value before the fence, which a fenced obtain
// learns only inside Redis; tail is the part after it.
func (v Value) head() string { return valueMagic + v.Token + "|" + v.Lease + "|" }

func (v Value) tail() string { return string(appendTail(nil, v.Since, v.Owner)) }

// newHead returns the value head "ls1|<token>|<lease>|" of a fresh hold:
// one allocation for it, its secret token and its public lease id, which
// headToken and headLease return as substrings of it.
func newHead() string {
	var r [24]byte
	rand.Read(r[:]) // never fails since Go 1.24
	const n = len(valueMagic) + 22 + 1 + 16 + 1
	var b [n]byte
	copy(b[:], valueMagic)
	base64.RawURLEncoding.Encode(b[len(valueMagic):], r[:16])
	b[len(valueMagic)+22] = '|'
	hex.Encode(b[len(valueMagic)+23:], r[16:])
	b[n-1] = '|'
	return string(b[:])
}

// headToken returns the secret token of a head made by newHead.
func headToken(head string) string { return head[len(valueMagic) : len(valueMagic)+22] }

// headLease returns the public lease id of a head made by newHead.
func headLease(head string) string { return head[len(valueMagic)+23 : len(head)-1] }

// appendTail appends the value tail "|<since ms>|<owner>".
func appendTail(b []byte, since time.Time, owner string) []byte {
	b = append(b, '|')
	b = strconv.AppendInt(b, since.UnixMilli(), 10)
	b = append(b, '|')
	return append(b, owner...)
}

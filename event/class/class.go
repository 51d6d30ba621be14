// Package class names lock classes: a class groups the keys of one kind of
// lock ("workflow:123" and "workflow:987" are class "workflow:*"), and is
// what metrics, pages and advice are labelled with, never the raw key.
//
// The rule, in one place for every side that names a class (the collector's
// state, extra/lockotel's spans): the first user rule (Rules, a Redis glob
// pattern, Match) whose pattern matches the key names it; otherwise the
// default derivation (Default) replaces the segments and parts of the key
// that look like identifiers with '*'. Names are valid UTF-8 without
// control characters, at most MaxLen bytes (AppendSanitized). The
// collector's cap on how many classes it derives (the rest are Other) is
// its own (collector/state).
package class

import "unicode/utf8"

const (
	// Other names the keys of classes beyond the collector's limit.
	Other = "other"
	// MaxLen bounds a class name in bytes: classes are label values, and a
	// 10 kB key must not become a 10 kB label.
	MaxLen = 96
)

// Rule names the class of the keys that match Pattern: Class, or the
// pattern itself when Class is empty. Pattern is a glob over the raw key
// bytes in Redis's grammar, the one --watch patterns follow (Match): '*'
// matches any run of bytes (including ':' and '/'), '?' exactly one byte,
// '[...]' one byte of a set (ranges, '^' negation), '\' escapes the next
// byte; every other byte matches itself.
type Rule struct {
	Pattern string
	Class   string
}

// Rules are Rules ready to match, in order.
type Rules []Rule

// NewRules compiles rules: each class name sanitized as every class is.
func NewRules(rules []Rule) Rules {
	out := make(Rules, 0, len(rules))
	for _, r := range rules {
		c := r.Class
		if c == "" {
			c = r.Pattern
		}
		out = append(out, Rule{Pattern: r.Pattern, Class: string(appendSanitized(nil, c, MaxLen))})
	}
	return out
}

// Match returns the class given by the first rule that matches key.
func (rs Rules) Match(key string) (string, bool) {
	for i := range rs {
		if Match(rs[i].Pattern, key) {
			return rs[i].Class, true
		}
	}
	return "", false
}

// Default returns the class the collector derives for key when no --class
// rule matches it and the class limit is not reached (see AppendDefault):
// what a client that knows no rules can name, as extra/lockotel does in its
// spans.
func Default(key string) string { return string(AppendDefault(nil, key)) }

// AppendDefault appends the default class of key: the key split into
// segments on ':' and '/', each segment split further on '-', '_' and '.',
// with every part that looks like an identifier replaced by '*' (see
// isIdentifier). The result is valid UTF-8 (invalid bytes become U+FFFD),
// has control characters replaced by '?', and is at most MaxLen bytes:
// a longer class is cut at a character boundary and ends in '*', so it still
// reads as a glob covering its keys.
func AppendDefault(dst []byte, key string) []byte {
	start := len(dst)
	limit := start + MaxLen
	// A whole segment is tested first so that a UUID (which contains '-')
	// is recognised before the sub-split would cut it apart.
	for i := 0; i <= len(key); {
		j := i
		for j < len(key) && key[j] != ':' && key[j] != '/' {
			j++
		}
		seg := key[i:j]
		if IsUUID(seg) {
			dst = append(dst, '*')
		} else {
			dst = appendParts(dst, seg, limit)
		}
		if len(dst) > limit {
			return truncateClass(dst, start)
		}
		if j == len(key) {
			break
		}
		dst = append(dst, key[j])
		i = j + 1
	}
	if len(dst) > limit {
		return truncateClass(dst, start)
	}
	return dst
}

// lastSegment returns where the last segment of key begins: after its last
// ':' or '/', or 0 if it has neither.
func lastSegment(key string) int {
	i := len(key)
	for i > 0 && key[i-1] != ':' && key[i-1] != '/' {
		i--
	}
	return i
}

// wholeIdentifier reports whether segment seg derives to '*' whole.
func wholeIdentifier(seg string) bool { return IsUUID(seg) || isIdentifier(seg) }

// appendParts appends seg with its identifier-like parts replaced by '*',
// stopping once dst is longer than limit (the caller truncates).
func appendParts(dst []byte, seg string, limit int) []byte {
	if isIdentifier(seg) {
		return append(dst, '*')
	}
	for i := 0; i <= len(seg); {
		j := i
		for j < len(seg) && seg[j] != '-' && seg[j] != '_' && seg[j] != '.' {
			j++
		}
		part := seg[i:j]
		// A segment of one part was tested whole above.
		if (i > 0 || j < len(seg)) && isIdentifier(part) {
			dst = append(dst, '*')
		} else {
			// Room for one more whole rune past limit, so a cut part always
			// overflows and gets the truncation mark.
			dst = appendSanitized(dst, part, limit+utf8.UTFMax-len(dst))
		}
		if j == len(seg) || len(dst) > limit {
			break
		}
		dst = append(dst, seg[j])
		i = j + 1
	}
	return dst
}

// truncateClass cuts dst[start:] to fit MaxLen with a trailing '*'.
func truncateClass(dst []byte, start int) []byte {
	cut := start + MaxLen - 1
	for cut > start && !utf8.RuneStart(dst[cut]) {
		cut--
	}
	dst = dst[:cut]
	// Avoid a doubled "**" when the cut lands right after a wildcard.
	if len(dst) > start && dst[len(dst)-1] == '*' {
		return dst
	}
	return append(dst, '*')
}

// appendSanitized appends s as valid UTF-8 without control characters, at
// most max bytes (cut at a character boundary).
func appendSanitized(dst []byte, s string, max int) []byte {
	dst, _ = AppendSanitized(dst, s, max)
	return dst
}

// AppendSanitized appends s to dst as valid UTF-8 (invalid bytes become
// U+FFFD) without control characters (they become '?'), at most max bytes
// of it, cut at a character boundary, and returns how many bytes of s it
// consumed. Class names follow this rule, which makes them label values;
// the Prometheus export applies it to key labels.
func AppendSanitized(dst []byte, s string, max int) ([]byte, int) {
	if len(s) <= max && isPrintableASCII(s) {
		// Most keys: nothing to replace, nothing to cut.
		return append(dst, s...), len(s)
	}
	limit := len(dst) + max
	i := 0
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if len(dst)+1 > limit {
				return dst, i
			}
			if c < 0x20 || c == 0x7f {
				c = '?'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			if len(dst)+3 > limit {
				return dst, i
			}
			dst = append(dst, "\uFFFD"...)
			i++
			continue
		}
		if len(dst)+size > limit {
			return dst, i
		}
		dst = append(dst, s[i:i+size]...)
		i += size
	}
	return dst, i
}

// isIdentifier reports whether part varies per key rather than naming a
// kind of lock: all digits, 8 or more hex digits, or a token of 20 or more
// letters and digits mixing both (ULID, KSUID, base62 ids).
func isIdentifier(part string) bool {
	if part == "" {
		return false
	}
	// One table lookup per byte and no branch on its kind: classes are
	// derived for every new key, and a stream of distinct keys derives one
	// per acquisition.
	all, some := uint8(byteDigit|byteHex|byteAlnum), uint8(0)
	for i := 0; i < len(part); i++ {
		c := byteKinds[part[i]]
		all &= c
		some |= c
	}
	switch {
	case all&byteDigit != 0:
		return true
	case all&byteHex != 0 && len(part) >= 8:
		return true
	case all&byteAlnum != 0 && len(part) >= 20 && some&byteDigit != 0 && some&byteLetter != 0:
		return true
	}
	return false
}

// Kinds of a byte (byteKinds).
const (
	byteDigit     = 1 << iota // 0-9
	byteHex                   // 0-9, a-f, A-F
	byteAlnum                 // 0-9, a-z, A-Z
	byteLetter                // a-z, A-Z
	bytePrintable             // ASCII from ' ' to '~'
)

var byteKinds = func() (t [256]uint8) {
	for c := range t {
		switch {
		case c >= '0' && c <= '9':
			t[c] = byteDigit | byteHex | byteAlnum
		case c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F':
			t[c] = byteHex | byteAlnum | byteLetter
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			t[c] = byteAlnum | byteLetter
		}
		if c >= 0x20 && c < 0x7f {
			t[c] |= bytePrintable
		}
	}
	return t
}()

// isPrintableASCII reports whether s is ASCII without control characters:
// what appendSanitized copies unchanged.
func isPrintableASCII(s string) bool {
	all := uint8(bytePrintable)
	for i := 0; i < len(s); i++ {
		all &= byteKinds[s[i]]
	}
	return all != 0
}

// IsUUID reports whether s is a textual UUID: 8-4-4-4-12 hex digits, either
// case (the class of a key replaces such a segment; Redisson names its
// clients by one).
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// SharedPrefix returns the part of key up to its last ':' or '/' when the
// segment after it derives to '*' whole: every key made of that prefix and
// such a segment has the same default class, which a cache of classes by
// prefix may rely on.
func SharedPrefix(key string) (string, bool) {
	i := lastSegment(key)
	if i == 0 || !wholeIdentifier(key[i:]) {
		return "", false
	}
	return key[:i], true
}

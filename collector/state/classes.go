package state

import (
	"unicode/utf8"

	"github.com/lockscope/lockscope/collector/internal/glob"
	"github.com/lockscope/lockscope/internal/keytext"
)

// Class names with a fixed meaning.
const (
	// OtherClass collects the keys of classes beyond Config.MaxClasses.
	OtherClass = "other"
	// maxClassLen bounds a class name in bytes: classes are label values,
	// and a 10 kB key must not become a 10 kB label.
	maxClassLen = 96
)

// classRule is a ClassRule ready to match.
type classRule struct {
	pattern string
	class   string
}

func compileRules(rules []ClassRule) []classRule {
	out := make([]classRule, 0, len(rules))
	for _, r := range rules {
		c := r.Class
		if c == "" {
			c = r.Pattern
		}
		out = append(out, classRule{pattern: r.Pattern, class: string(appendSanitized(nil, c, maxClassLen))})
	}
	return out
}

// ruleClass returns the class given by the first of rules that matches key.
func ruleClass(key string, rules []classRule) (string, bool) {
	for i := range rules {
		if glob.Match(rules[i].pattern, key) {
			return rules[i].class, true
		}
	}
	return "", false
}

// DefaultClass returns the class the collector derives for key when no
// --class rule matches it and the class limit is not reached (see
// appendDefaultClass): what a client that knows no rules can name, as
// extra/otel does in its spans.
func DefaultClass(key string) string { return string(appendDefaultClass(nil, key)) }

// appendDefaultClass appends the default class of key: the key split into
// segments on ':' and '/', each segment split further on '-', '_' and '.',
// with every part that looks like an identifier replaced by '*' (see
// isIdentifier). The result is valid UTF-8 (invalid bytes become U+FFFD),
// has control characters replaced by '?', and is at most maxClassLen bytes:
// a longer class is cut at a character boundary and ends in '*', so it still
// reads as a glob covering its keys.
func appendDefaultClass(dst []byte, key string) []byte {
	start := len(dst)
	limit := start + maxClassLen
	// A whole segment is tested first so that a UUID (which contains '-')
	// is recognised before the sub-split would cut it apart.
	for i := 0; i <= len(key); {
		j := i
		for j < len(key) && key[j] != ':' && key[j] != '/' {
			j++
		}
		seg := key[i:j]
		if keytext.IsUUID(seg) {
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
func wholeIdentifier(seg string) bool { return keytext.IsUUID(seg) || isIdentifier(seg) }

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

// truncateClass cuts dst[start:] to fit maxClassLen with a trailing '*'.
func truncateClass(dst []byte, start int) []byte {
	cut := start + maxClassLen - 1
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

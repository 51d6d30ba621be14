// The one glob grammar of lockscope's patterns is Redis's: --watch patterns
// go to Redis (PSUBSCRIBE, SCAN MATCH), so --class patterns and every other
// pattern matched in Go mean what Redis would make of them.
//
// Over the raw bytes of a key:
//
//   - '*' matches any run of bytes, ':' and '/' included;
//   - '?' exactly one byte;
//   - "[abc]" one byte of the set, "[a-z]" one of a range (either way
//     round: "[z-a]" is the same; bytes from 0x80 sort before 0x00, as
//     Redis on x86-64 compares them), "[^...]" any byte not in the set;
//     inside a set '\' takes the next byte literally, so "[\]]" matches ']';
//   - '\' takes the next byte literally: "\*" a star, "\[" a bracket,
//     "\\" a backslash.
//
// Every other byte matches itself. A '[' left open runs to the end of the
// pattern (Redis's reading of it); a trailing '\' matches a backslash.

package class

import "strings"

// Match reports whether s matches pattern. It is a port of Redis's
// stringmatchlen (util.c), including its cut-off that keeps patterns with
// many stars linear instead of exponential. The empty key matches the
// patterns made of stars only, as it matches them after any prefix (and
// as KEYS * lists it), where stringmatchlen alone would answer false.
func Match(pattern, s string) bool {
	if s == "" {
		return strings.Trim(pattern, "*") == ""
	}
	skip := false
	return match(pattern, s, &skip)
}

func match(p, s string, skipLonger *bool) bool {
	for len(p) > 0 && len(s) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for len(s) > 0 {
				if match(p[1:], s, skipLonger) {
					return true
				}
				if *skipLonger {
					return false
				}
				s = s[1:]
			}
			*skipLonger = true
			return false
		case '?':
			s = s[1:]
		case '[':
			p = p[1:]
			not := len(p) > 0 && p[0] == '^'
			if not {
				p = p[1:]
			}
			match := false
			for {
				if len(p) >= 2 && p[0] == '\\' {
					p = p[1:]
					if p[0] == s[0] {
						match = true
					}
				} else if len(p) == 0 {
					// Unterminated set: Redis steps back so the outer
					// loop's advance lands on the end of the pattern.
					break
				} else if p[0] == ']' {
					break
				} else if len(p) >= 3 && p[1] == '-' {
					// Redis compares C chars: signed on x86-64 (bytes from
					// 0x80 sort before 0x00), unsigned on arm64. This
					// follows x86-64, where the tests hold it to Redis.
					lo, hi, c := int8(p[0]), int8(p[2]), int8(s[0])
					if lo > hi {
						lo, hi = hi, lo
					}
					if c >= lo && c <= hi {
						match = true
					}
					p = p[2:]
				} else if p[0] == s[0] {
					match = true
				}
				p = p[1:]
			}
			if not {
				match = !match
			}
			if !match {
				return false
			}
			s = s[1:]
			if len(p) == 0 {
				// The unterminated set consumed the whole pattern.
				return len(s) == 0
			}
		case '\\':
			if len(p) >= 2 {
				p = p[1:]
			}
			fallthrough
		default:
			if p[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		p = p[1:]
		if len(s) == 0 {
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			break
		}
	}
	return len(p) == 0 && len(s) == 0
}

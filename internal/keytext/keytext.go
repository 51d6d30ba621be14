// Package keytext is the one home of how lockscope writes a lock key out.
// Keys are arbitrary bytes from applications: newlines, NULs, terminal
// escapes, invalid UTF-8 and 10 kB keys are all legal, and each medium
// lockscope writes to needs its own rule so that no byte is lost and none
// acts on the reader:
//
//   - a page (HTML): Visible, then Cut for table cells; HTML escaping is
//     templ's job on top;
//   - a URL path: PathSegment;
//   - a terminal: Terminal;
//   - JSON: the string itself plus, when it is not valid UTF-8, B64IfInvalid
//     in a companion "<field>_b64" field;
//   - a log: LogAttrs, JSON's rule for the same reason (a JSON log handler
//     replaces invalid bytes too).
//
// Owners, reasons and other strings that come from applications or
// requests follow the same rules. (The shape of a UUID, which keys and
// Redisson's client ids carry, is event/class's IsUUID.) The lock library keeps its own quoting in
// its error messages: it is public and imports nothing of lockscope's
// internals.
package keytext

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Visible renders s so that every byte is visible: printable UTF-8 stays as
// it is; control characters, invalid bytes and the line and paragraph
// separators become Go escapes (\n, \x00, \xff, \u2028) so a newline or a
// NUL cannot hide inside a key on a page. Once anything is escaped, '\'
// is escaped too. The second result reports whether anything was escaped
// (pages then say so: "a\nb" could be the four bytes it shows). HTML
// escaping is the template's job, not this function's.
func Visible(s string) (string, bool) {
	clean := true
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if hidden(r, size) {
			clean = false
			break
		}
		i += size
	}
	if clean {
		return s, false
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x`)
			b.WriteString(hex2(byte(r)))
		case (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029':
			b.WriteString(`\u`)
			h := strconv.FormatInt(int64(r), 16)
			b.WriteString(strings.Repeat("0", 4-len(h)) + h)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String(), true
}

// hidden reports whether the rune r of size bytes would not show as itself.
func hidden(r rune, size int) bool {
	return (r == utf8.RuneError && size == 1) || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029'
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&0xf]})
}

// Cut shortens a Visible string to at most max bytes plus "…", at a rune
// boundary, for table cells; the full text stays in the title attribute
// and on the key's own page.
func Cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// PathSegment returns key as one escaped URL path segment. url.PathEscape
// escapes '/', '?', '%', '#', spaces, control and non-ASCII bytes (so
// invalid UTF-8 survives byte for byte); '.' is escaped too, so that the
// keys "." and ".." cannot be read as path steps by a client or a proxy
// that cleans paths. url.PathUnescape reverses it.
func PathSegment(key string) string {
	return strings.ReplaceAll(url.PathEscape(key), ".", "%2E")
}

// Terminal makes s safe to print on a terminal: a printable key without
// spaces or quotes is shown as it is, anything else Go-quoted (so an ESC
// cannot recolour the screen and a trailing space stays visible). With
// max > 0 a longer s is cut to its first max bytes, never inside a
// character, and followed by its length: "…(10240 bytes)".
func Terminal(s string, max int) string {
	plain := s != "" && utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool {
		return !unicode.IsPrint(r) || unicode.IsSpace(r) || r == '"'
	})
	cut := ""
	if max > 0 && len(s) > max {
		cut = fmt.Sprintf("…(%d bytes)", len(s))
		s = s[:runeCut(s, max)]
	}
	if !plain {
		s = strconv.Quote(s)
	}
	return s + cut
}

// runeCut returns where to cut s to at most max bytes without splitting a
// valid UTF-8 character: invalid bytes before the cut are kept (Quote shows
// them as \x escapes).
func runeCut(s string, max int) int {
	for i := max - 1; i >= 0 && i > max-utf8.UTFMax; i-- {
		if !utf8.RuneStart(s[i]) {
			continue
		}
		if r, size := utf8.DecodeRuneInString(s[i:]); (r != utf8.RuneError || size > 1) && i+size > max {
			return i
		}
		break
	}
	return max
}

// B64IfInvalid is JSON's rule for keys and owners (foreign locks fill the
// owner with the raw stored value) and any string that comes from
// applications: encoding/json replaces invalid UTF-8 with U+FFFD and so
// loses bytes, so for such a string the exact bytes also travel
// base64-encoded (standard alphabet, padded) in a companion "<field>_b64"
// field. Clients that need the bytes read key_b64 when present, else key.
// It returns "" for valid UTF-8, which the companion's omitempty drops.
func B64IfInvalid(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(s))
}

// LogAttrs returns the slog arguments for a key (or owner) logged as name:
// name=s, and name_b64 with its exact bytes when s is not valid UTF-8. A
// text log quotes s itself, byte for byte; a JSON log cannot carry invalid
// bytes, so an audit line would not say which key without the companion.
func LogAttrs(name, s string) []any {
	if b := B64IfInvalid(s); b != "" {
		return []any{name, s, name + "_b64", b}
	}
	return []any{name, s}
}

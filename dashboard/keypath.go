package dashboard

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/gorilla/mux"
)

// Keys are arbitrary bytes. In URLs a key is one path segment: url.PathEscape
// escapes '/', '?', '%', '#', spaces, control and non-ASCII bytes (so invalid
// UTF-8 survives byte for byte), and we also escape '.', so that keys "." and
// ".." cannot be read as path steps by a client or a proxy that cleans paths.
// The router matches the still-encoded path (mux UseEncodedPath) and
// keyFromRequest decodes the segment itself.

// escapeKey returns key as one escaped URL path segment.
func escapeKey(key string) string {
	return strings.ReplaceAll(url.PathEscape(key), ".", "%2E")
}

// keyPath is the detail page of key.
func keyPath(key string) string { return "/keys/" + escapeKey(key) }

// releasePath is the forced-release confirmation and action of key.
func releasePath(key string) string { return keyPath(key) + "/release" }

// apiLockPath is the JSON detail of key.
func apiLockPath(key string) string { return "/api/v1/locks/" + escapeKey(key) }

// keyFromRequest decodes the {key} route variable.
func keyFromRequest(r *http.Request) (string, bool) {
	raw, ok := mux.Vars(r)["key"]
	if !ok || raw == "" {
		return "", false
	}
	key, err := url.PathUnescape(raw)
	if err != nil || key == "" {
		return "", false
	}
	return key, true
}

// b64IfInvalid supports JSON encoding of keys and owners (foreign locks fill
// the owner with the raw stored value). encoding/json replaces invalid UTF-8
// with U+FFFD and so loses bytes: for such a string the API also sends the
// exact bytes base64-encoded (std alphabet, padded) in a companion
// "<field>_b64" field. Clients that need the bytes read key_b64 when present,
// else key. It returns "" for valid UTF-8.
func b64IfInvalid(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(s))
}

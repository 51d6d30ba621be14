package dashboard

import (
	"net/http"
	"net/url"

	"github.com/gorilla/mux"

	"github.com/lockscope/lockscope/internal/keytext"
)

// Keys are arbitrary bytes. In URLs a key is one path segment
// (keytext.PathSegment). The router matches the still-encoded path (mux
// UseEncodedPath) and keyFromRequest decodes the segment itself.

// keyPath is the detail page of key.
func keyPath(key string) string { return "/keys/" + keytext.PathSegment(key) }

// releasePath is the forced-release confirmation and action of key.
func releasePath(key string) string { return keyPath(key) + "/release" }

// apiLockPath is the JSON detail of key.
func apiLockPath(key string) string { return "/api/v1/locks/" + keytext.PathSegment(key) }

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

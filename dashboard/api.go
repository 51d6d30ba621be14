package dashboard

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/lockscope/lockscope/internal/lockjson"
	"github.com/lockscope/lockscope/lock"
)

// The JSON API mirrors the pages: each page's file holds its JSON handler
// too (overview.go: /api/v1/overview and /api/v1/hotkeys, and so on). This
// file holds what they share. Conventions:
//   - durations are seconds as floats ("wait_p99_seconds"), times RFC 3339
//     with nanoseconds in UTC, omitted when unknown (lockjson.Time);
//   - keys and owners are strings; when one is not valid UTF-8 its exact
//     bytes are also sent base64-encoded in "<field>_b64"
//     (keytext.B64IfInvalid);
//   - a lock's holder in Redis has the shape the operator commands print
//     (lockjson.Holder);
//   - errors are {"error": "..."} with a 4xx/5xx status.

type apiError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true) // a key like "</script>" stays inert if pasted into a page
	enc.Encode(v)
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// holderJSON is h in the JSON shape the operator commands print too.
func holderJSON(h *lock.Holder) *lockjson.Holder {
	j := lockjson.NewHolder(h)
	return &j
}

// Package dashboard serves lockscope's operator pages and JSON API: the
// overview of lock activity, every tracked key, one key's detail, who
// blocks whom, and the forced release of a stuck lock.
//
// Pages are templ components rendered on the server (inline SVG for the
// pictures, a small script of our own for live refresh; every page works
// without JavaScript). Data comes from a Querier (the aggregation state,
// collector/state, answers it); forced releases go through a Releaser (a
// *lock.Client), which deletes a lock only if its value still matches the
// fingerprint the operator saw. A key a watch rule calls a Redisson
// semaphore is read live through Options.Semaphore (semaphore.go): its
// key page and JSON show its permits, and no release deletes it.
//
// # Files: one per page
//
// Each page is a pair, as in templ's own examples: NAME.templ holds its
// markup, NAME.go its view model (small structs of display-ready strings),
// the handler that fills it and renders NAME.templ, and the JSON mirror of
// the same data under /api/v1. The components make no decisions beyond
// showing or hiding; the handlers make them.
//
//	overview.templ, overview.go   GET /           GET /api/v1/overview, /api/v1/hotkeys
//	keys.templ, keys.go           GET /keys       GET /api/v1/locks
//	key.templ, key.go             GET /keys/{key} GET /api/v1/locks/{key}
//	blocking.templ, blocking.go   GET /blocking   GET /api/v1/blocking
//	release.templ, release.go     GET, POST /keys/{key}/release, POST /api/v1/locks/{key}/release
//	incidents.templ, incidents.go GET /incidents  GET /api/v1/incidents
//	owner.templ, owner.go         GET /owners/{owner}, POST /owners/{owner}/release, GET /api/v1/owners/{owner}
//	classes.templ, classes.go     GET /classes    GET /api/v1/classes
//	class.templ, class.go         GET /classes/{class} (class_sections.templ: other features' sections)
//	advice.go                     GET /api/v1/advice, the overview's advice tile
//
// A new page follows the same pattern: its .templ and .go side by side, its
// routes added in routes (dashboard.go). What pages share stands apart:
// layout.templ and layout.go (the frame, key and owner cells, rendering,
// errors), chart.go (sparklines, distributions, the timeline), format.go
// (human units), keypath.go (key URLs), api.go (JSON conventions),
// querier.go (what the dashboard reads of the state), and redis.go, the
// only place a page talks to Redis (who holds a key now, the
// forced release and its audit log). Authentication, host checks and
// security headers are middleware.go, authlimit.go and hosts.go.
//
// # Security model
//
//   - Operator credentials are HTTP basic auth (Username and Password) and/or
//     a bearer token (Token), compared in constant time.
//   - Without credentials the dashboard is read-only: release controls are
//     hidden, a banner says so, and the server refuses every release (403).
//   - Reading (pages and GET API) is open unless RequireAuthForRead is set:
//     the default suits a loopback listener or a reverse proxy that does its
//     own authentication; changing state always needs credentials.
//   - /healthz, /readyz and /metrics never need credentials.
//   - State changes only by POST, behind http.CrossOriginProtection.
//   - Every response carries a Content-Security-Policy with a per-request
//     nonce (no inline script or style without it, no framing) and
//     nosniff / no-referrer headers.
//
// # Routes
//
// As in DESIGN.md: GET / (overview; ?window=1m|5m|1h&by=contentions|wait),
// GET /keys (?q=&class=&held=1&state=&sort=attention|contentions|wait|hold|key&order=asc&page=N),
// GET /keys/{key}, GET /blocking, GET /keys/{key}/release (the confirmation,
// operators only), POST /keys/{key}/release (form: fingerprint, reason), and
// the JSON mirror under /api/v1: overview, hotkeys (?window=&by=&n=), locks
// (?q=&class=&held=&state=&sort=&order=&offset=&limit=), locks/{key}
// (?reveal=value for operators), blocking, and POST locks/{key}/release
// with {"fingerprint": "...", "reason": "..."}. Plus /healthz, /readyz and
// /metrics.
//
// GET /keys/{key} and locks/{key} read the key's holder from Redis; a
// viewer without operator credentials gets nothing Redis holds under a
// key no lock event names, and never a fingerprint (viewerInspect).
//
// # Keys
//
// Keys are arbitrary bytes; internal/keytext holds how each medium writes
// them. In a URL a key is one path segment escaped with url.PathEscape,
// dots escaped too ("/keys/a%2Fb%3Fc"); the router matches the escaped path
// and decodes the segment itself. In JSON a key (or owner) that is not
// valid UTF-8 also travels as base64 of its exact bytes in "key_b64"
// ("owner_b64"), because a JSON string cannot carry such bytes; clients read
// key_b64 when present, else key. In HTML every key is escaped by templ, and
// control characters and invalid bytes are displayed as Go escapes (\n,
// \xff) so nothing hides inside a key. In the audit log a key that is not
// valid UTF-8 also carries key_b64, as in JSON.
package dashboard

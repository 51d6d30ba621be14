package reliability

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"golang.org/x/net/html"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/dashboard"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// hostileKeys are lock keys applications may really use, and some that
// attackers would.
var hostileKeys = []string{
	`<script>alert(1)</script>`,
	`"quoted" and 'single' \ back`,
	"line\nbreak\r\ncarriage",
	strings.Repeat("k", 400), // long: state.MaxKeyBytes, less room for the test prefix
	"invalid\xff\xfeutf8\x00nul",
	"/leading/and/trailing/",
	"query?a=1&b=<i id=xss-key>",
	"100%25%zz%",
	"..",
	"job:{42}:<img src=x onerror=alert(2)>",
}

// hostileOwner is the owner every hostile lock is taken by.
const hostileOwner = "app<b id=xss-owner>\"'\xff/host/1"

// escapePath is how a client puts an arbitrary key into one URL path
// segment: url.PathEscape escapes '/', '?', '%', control and non-ASCII
// bytes, and '.' is escaped too so "." and ".." are not path steps.
func escapePath(key string) string {
	return strings.ReplaceAll(url.PathEscape(key), ".", "%2E")
}

// apiLock is the part of GET /api/v1/locks/{key} this test reads.
type apiLock struct {
	Key      string `json:"key"`
	KeyB64   string `json:"key_b64"`
	Held     bool   `json:"held"`
	Owner    string `json:"owner"`
	OwnerB64 string `json:"owner_b64"`
	Href     string `json:"href"`
	Redis    *struct {
		Owner    string `json:"owner"`
		OwnerB64 string `json:"owner_b64"`
	} `json:"redis_holder"`
}

// exact returns the bytes of an API string field and its _b64 companion.
func exact(s, b64 string) (string, error) {
	if b64 == "" {
		return s, nil
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	return string(b), err
}

// htmlText returns the text content of an HTML document (entities decoded),
// and fails if it does not parse.
func htmlText(body []byte) (string, error) {
	doc, err := html.Parse(bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return b.String(), nil
}

// rawMarkup reports whether body carries the markup of key unescaped.
func rawMarkup(body []byte, key string) bool {
	for _, m := range []string{"<script>alert(1)", "<img src=x", "<i id=xss-key>", "<b id=xss-owner>"} {
		if strings.Contains(key, m) || strings.Contains(hostileOwner, m) {
			if bytes.Contains(body, []byte(m)) {
				return true
			}
		}
	}
	return false
}

// get fetches url and returns status and body.
func get(ctx context.Context, u string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// TestHostileKeysEndToEnd takes locks on hostile keys through the library,
// with contention, and follows them through the stream into the real
// `lockscope serve`: the dashboard's key pages answer 200 with the key
// escaped, never raw markup; the JSON API gives back the exact bytes; the
// links the API itself hands out work; /metrics stays a valid exposition
// with the keys as hot-key labels. Entries the collector must refuse
// (oversized, unknown schema version, corrupt) are counted and skipped.
func TestHostileKeysEndToEnd(t *testing.T) {
	t.Parallel()
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := testCtx(t, 60*time.Second)
	serve := startServe(t, bin, srv.URL(), nil, "--consumer", "c1")

	em := lock.NewEmitter(rdb, nil)
	holder := lock.New(rdb, &lock.Options{Owner: hostileOwner, Recorder: em})
	rival := lock.New(rdb, &lock.Options{Owner: "rival", Recorder: em})
	for _, key := range hostileKeys {
		l, err := holder.Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Fencing: true})
		if err != nil {
			t.Fatalf("Obtain(%.40q): %v", key, err)
		}
		defer l.Release(context.Background())
		if _, h, err := rival.Try(ctx, key, time.Second, nil); h == nil || h.Owner != hostileOwner {
			t.Fatalf("Try(%.40q) = holder %+v, %v; want %q", key, h, err, hostileOwner)
		}
	}
	// Entries the collector must count as malformed and skip.
	huge := strings.Repeat("x", event.MaxStringLen+1)
	bad := [][]any{
		{"v", "2", "type", "acquired", "key", "from-the-future"},             // unknown schema version
		{"v", "1", "type", "acquired", "key", huge, "ts", "1"},               // key over the limit
		{"v", "1", "n", "3", "batch", "\x01\x00garbage"},                     // corrupt batch
		{"v", "1", "n", strconv.Itoa(event.MaxBatchEvents + 1), "batch", ""}, // too many events
		event.PackedFields(1, make([]byte, event.MaxBatchBytes+1)),           // batch over the limit
	}
	for _, values := range bad {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: event.DefaultStream, Values: values}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := em.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := float64(em.Stats().Sent)
	var m families
	if !redistest.Poll(ctx, func() bool {
		m = serve.metrics(ctx, t)
		return m.sum("lockscope_events_total") >= want && m.sum("lockscope_events_malformed_total") >= float64(len(bad))
	}) {
		t.Fatalf("serve applied %v events (want %v), %v malformed (want %d)", m.sum("lockscope_events_total"), want, m.sum("lockscope_events_malformed_total"), len(bad))
	}
	if got := m.sum("lockscope_events_malformed_total"); got != float64(len(bad)) {
		t.Errorf("lockscope_events_malformed_total = %v, want %d", got, len(bad))
	}
	if got := m.sum("lockscope_events_total"); got != want {
		t.Errorf("lockscope_events_total = %v, want %v (the malformed entries skipped, nothing else)", got, want)
	}

	for _, key := range hostileKeys {
		name := fmt.Sprintf("%.30q", key)
		// The JSON API gives the exact bytes back.
		code, body, err := get(ctx, serve.url("/api/v1/locks/"+escapePath(key)))
		if err != nil || code != http.StatusOK {
			t.Errorf("GET /api/v1/locks/%s = %d, %v: %.300s", name, code, err, body)
			continue
		}
		var v apiLock
		if err := json.Unmarshal(body, &v); err != nil {
			t.Errorf("%s: JSON: %v", name, err)
			continue
		}
		if got, err := exact(v.Key, v.KeyB64); err != nil || got != key {
			t.Errorf("API key of %s = %.60q (%v), want the exact bytes", name, got, err)
		}
		if got, err := exact(v.Owner, v.OwnerB64); err != nil || got != hostileOwner || !v.Held {
			t.Errorf("API owner of %s = %q held=%v (%v), want %q held", name, got, v.Held, err, hostileOwner)
		}
		if v.Redis == nil {
			t.Errorf("API redis_holder of %s = null, want the holder read from Redis", name)
		} else if got, _ := exact(v.Redis.Owner, v.Redis.OwnerB64); got != hostileOwner {
			t.Errorf("API redis_holder.owner of %s = %q, want %q", name, got, hostileOwner)
		}
		// The link the API hands out leads back to the same key.
		if code, body, err := get(ctx, serve.url(v.Href)); err != nil || code != http.StatusOK {
			t.Errorf("GET href %q of %s = %d, %v", v.Href, name, code, err)
		} else {
			var w apiLock
			json.Unmarshal(body, &w)
			if got, _ := exact(w.Key, w.KeyB64); got != key {
				t.Errorf("href %q of %s leads to key %.60q", v.Href, name, got)
			}
		}

		// The HTML page: 200, parses, shows the key as text, no raw markup.
		code, body, err = get(ctx, serve.url("/keys/"+escapePath(key)))
		if err != nil || code != http.StatusOK {
			t.Errorf("GET /keys/%s = %d, %v", name, code, err)
			continue
		}
		if rawMarkup(body, key) {
			t.Errorf("GET /keys/%s: body carries the key's or owner's markup unescaped", name)
		}
		text, err := htmlText(body)
		if err != nil {
			t.Errorf("GET /keys/%s: HTML does not parse: %v", name, err)
		}
		// The dashboard shows control characters and invalid bytes as Go
		// escapes (\n, \x00, \xff) so none can hide in a key; for the keys
		// here that is strconv.Quote without the quotes.
		show := key
		if !utf8.ValidString(key) || strings.ContainsAny(key, "\x00\n\r") {
			show = strings.Trim(strconv.Quote(key), `"`)
		}
		if show = show[:min(len(show), 60)]; !strings.Contains(text, show) {
			t.Errorf("GET /keys/%s: page text does not show the key (%.60q)", name, show)
		}
	}

	// /metrics parsed (scrape fails on an invalid exposition); hot-key
	// labels carry the contended keys, exactly when they can.
	labels := make(map[string]bool)
	for _, s := range m["lockscope_hot_key_contentions"].GetMetric() {
		for _, lp := range s.GetLabel() {
			if lp.GetName() == "key" {
				labels[lp.GetValue()] = true
			}
		}
	}
	for _, key := range hostileKeys {
		// Control characters become '?': a label must not carry an ESC
		// (or a newline) to the terminal of whoever curls /metrics.
		want := strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f {
				return '?'
			}
			return r
		}, key)
		if utf8.ValidString(key) && len(key) <= 200 && !labels[want] {
			t.Errorf("lockscope_hot_key_contentions has no series with key=%q; labels: %q", want, keysOf(labels))
		}
	}
	for l := range labels {
		if strings.ContainsFunc(l, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Errorf("hot-key label %q carries a control character", l)
		}
	}
	if len(labels) < len(hostileKeys) {
		t.Errorf("lockscope_hot_key_contentions has %d key labels, want >= %d (every hostile key contended once)", len(labels), len(hostileKeys))
	}
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// FuzzKeyThroughDashboard sends arbitrary keys through the collector's state
// and the dashboard's router: the JSON API must give back the exact bytes
// at the escaped path, and markup appended to whatever the fuzzer puts in
// front (quotes, comment ends, closing tags, broken UTF-8 ...) must reach
// the key page as text, never as markup.
func FuzzKeyThroughDashboard(f *testing.F) {
	for _, k := range hostileKeys {
		f.Add(k)
	}
	f.Add(".")
	f.Add("%2F")
	f.Add("a/../b")
	f.Add("#frag")
	f.Add(" ")
	agg := state.New(state.Config{})
	h, err := dashboard.New(agg, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	const payload = "<i id=fuzz-xss>"
	f.Fuzz(func(t *testing.T, prefix string) {
		if len(prefix) > 16<<10 {
			return
		}
		key := prefix + payload
		agg.Apply([]event.Event{{Type: event.Acquired, Key: key, Owner: hostileOwner, TS: time.Now().UnixNano(), TTL: time.Minute}})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/locks/"+escapePath(key), nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /api/v1/locks/%s = %d %.200s", escapePath(key), rec.Code, rec.Body.String())
		}
		var v apiLock
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		if got, err := exact(v.Key, v.KeyB64); err != nil || got != key {
			t.Fatalf("API key = %q (%v), want %q", got, err, key)
		}
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/keys/"+escapePath(key), nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /keys/%s = %d", escapePath(key), rec.Code)
		}
		if strings.Contains(rec.Body.String(), payload) {
			t.Fatalf("GET /keys/%s: page carries %q unescaped", escapePath(key), payload)
		}
		text, err := htmlText(rec.Body.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text, payload) {
			t.Fatalf("GET /keys/%s: page text does not show the key's %q", escapePath(key), payload)
		}
	})
}

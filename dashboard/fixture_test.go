package dashboard

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/net/html"

	"github.com/lockscope/lockscope/collector"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/internal/testkit/syncbuf"
	"github.com/lockscope/lockscope/lock"
)

// fixture is a dashboard over a real Aggregator and a real lock.Client on
// the shared test Redis. The client's events are applied to the aggregator
// as they happen, so what the pages show follows what the locks do.
type fixture struct {
	h    http.Handler
	agg  *state.Aggregator
	lc   *lock.Client
	rdb  redis.UniversalClient
	pfx  string
	logs *syncbuf.Buffer
	// incidents is the incident history the aggregator writes (in Redis,
	// under the test's prefix); flushIncidents writes what it derived.
	incidents *collector.IncidentStore
}

// flushIncidents writes the incidents the aggregator derived so far.
func (f *fixture) flushIncidents(t *testing.T) {
	t.Helper()
	if err := f.incidents.Flush(context.Background()); err != nil {
		t.Fatalf("writing the incident history: %v", err)
	}
}

const (
	testUser  = "alice"
	testPass  = "s3cret pass"
	testToken = "tok-0123456789"
)

// operatorOptions configures basic auth and a bearer token.
func operatorOptions() *Options {
	return &Options{Username: testUser, Password: testPass, Token: testToken, TokenOperator: "ci-bot"}
}

func newFixture(t *testing.T, opt *Options) *fixture {
	t.Helper()
	return newFixtureConfig(t, func(string) state.Config { return state.Config{} }, opt)
}

// newFixtureConfig is newFixture with the aggregator's configuration made
// by cfg from the test's key prefix.
func newFixtureConfig(t *testing.T, cfg func(pfx string) state.Config, opt *Options) *fixture {
	t.Helper()
	srv := redistest.Shared(t)
	f := &fixture{rdb: srv.Client(t), pfx: redistest.KeyPrefix(t), logs: &syncbuf.Buffer{}}
	f.incidents = collector.NewIncidentStore(f.rdb, f.pfx+"events", nil)
	cfg0 := cfg(f.pfx)
	cfg0.Incidents = f.incidents
	f.agg = state.New(cfg0)
	f.lc = lock.New(f.rdb, &lock.Options{Owner: "test-owner", Recorder: &applyRecorder{agg: f.agg}})
	if opt == nil {
		opt = &Options{}
	}
	o := *opt
	o.Logger = slog.New(slog.NewTextHandler(f.logs, nil))
	if o.Incidents == nil {
		o.Incidents = f.incidents
	}
	h, err := New(f.agg, f.lc, &o)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	f.h = h
	return f
}

// applyRecorder applies each lock event to the aggregator at once.
type applyRecorder struct {
	mu  sync.Mutex
	agg *state.Aggregator
}

func (r *applyRecorder) Record(e event.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.agg.Apply([]event.Event{e})
}

// req describes one request to the handler.
type req struct {
	method, target string
	form           url.Values
	json           any
	basic          [2]string
	bearer         string
	hdr            map[string]string
}

func (f *fixture) do(t *testing.T, r req) *httptest.ResponseRecorder {
	t.Helper()
	if r.method == "" {
		r.method = http.MethodGet
	}
	var body io.Reader
	ct := ""
	switch {
	case r.form != nil:
		body, ct = strings.NewReader(r.form.Encode()), "application/x-www-form-urlencoded"
	case r.json != nil:
		b, err := json.Marshal(r.json)
		if err != nil {
			t.Fatal(err)
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	hr := httptest.NewRequest(r.method, r.target, body)
	if ct != "" {
		hr.Header.Set("Content-Type", ct)
	}
	if r.basic[0] != "" {
		hr.SetBasicAuth(r.basic[0], r.basic[1])
	}
	if r.bearer != "" {
		hr.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	for k, v := range r.hdr {
		hr.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, hr)
	return rec
}

// obtain takes a real lock with the fixture's client.
func (f *fixture) obtain(t *testing.T, key, owner string, ttl time.Duration, autoRenew bool) *lock.Lease {
	t.Helper()
	l, err := f.lc.Obtain(context.Background(), key, ttl, &lock.ObtainOptions{Owner: owner, AutoRenew: autoRenew})
	if err != nil {
		t.Fatalf("Obtain(%q) = %v, want a lease", key, err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	return l
}

func (f *fixture) fingerprint(t *testing.T, key string) string {
	t.Helper()
	h, err := f.lc.Inspect(context.Background(), key)
	if err != nil {
		t.Fatalf("Inspect(%.40q) = %v", key, err)
	}
	return h.Fingerprint
}

// contended scripts a contended history for key: n acquisitions that each
// waited wait, by alternating owners, ending released.
func contended(key string, n int, wait time.Duration, at time.Time) []event.Event {
	var evs []event.Event
	for i := range n {
		owner := []string{"worker-1", "worker-2", "worker-3"}[i%3]
		lease := key + "#" + string(rune('a'+i%26))
		ts := at.Add(time.Duration(i) * 10 * time.Millisecond)
		evs = append(evs,
			event.Event{Type: event.Acquired, Key: key, Owner: owner, Lease: lease, TS: ts.UnixNano(), Wait: wait, Attempts: 3, TTL: 10 * time.Second},
			event.Event{Type: event.Released, Key: key, Owner: owner, Lease: lease, TS: ts.Add(5 * time.Millisecond).UnixNano(), Hold: 5 * time.Millisecond},
		)
	}
	return evs
}

func decodeJSON[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type = %q, want application/json; body %.200s", ct, rec.Body.String())
	}
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("json.Unmarshal(%.200s) = %v", rec.Body.String(), err)
	}
	return v
}

// jsonKey is the exact bytes of a key from the API's key / key_b64 pair.
func jsonKey(t *testing.T, key, b64 string) string {
	t.Helper()
	if b64 == "" {
		return key
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("key_b64 %q: %v", b64, err)
	}
	return string(b)
}

func htmlDoc(t *testing.T, rec *httptest.ResponseRecorder) *html.Node {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("Content-Type = %q, want text/html", ct)
	}
	return parseHTML(t, rec.Body.String())
}

package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// a11yTools is where scripts/deps.sh installs the checkers (npm ci).
var a11yTools = filepath.Join("..", "tools", "a11y")

// a11yTool returns the path of a file under tools/a11y/node_modules, failing
// the test when the checkers are not installed.
func a11yTool(t *testing.T, rel string) string {
	t.Helper()
	p := filepath.Join(a11yTools, "node_modules", rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("accessibility checkers not installed (%v): run scripts/deps.sh, or npm ci --prefix tools/a11y", err)
	}
	return p
}

// everyState fills a fixture with what each page can show: hot keys,
// a stuck holder with waiters, a deadlock, an expiration, a forced release,
// a lock without expiry, and a real lock in Redis for the release page. It
// returns the pages to check, operator-only ones last.
func everyState(t *testing.T, f *fixture) (pages, operatorPages []string) {
	t.Helper()
	now := time.Now()
	// Only the held lock below is written to Redis (under the test's
	// prefix); the other keys live in this fixture's aggregator alone, so
	// they read as an application would name them in the screenshot.
	p := ""
	stuck, x, y := p+"report:nightly", p+"ledger:account-7", p+"ledger:account-9"
	for i, k := range []string{p + "invoice:1001", p + "inventory:sku-448", p + "cart:8f14e45f-ceea-467f"} {
		f.agg.Apply(contended(k, 12+4*i, 30*time.Millisecond, now.Add(-40*time.Second)))
	}
	at := func(d time.Duration) int64 { return now.Add(-d).UnixNano() }
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: stuck, Owner: "reporter/ip-10-0-2-13/17", Lease: "l-stuck", TS: at(10 * time.Minute), TTL: time.Hour, Attempts: 1},
		{Type: event.Waiting, Key: stuck, Owner: "reporter/ip-10-0-2-14/9", Lease: "w-1", TS: at(20 * time.Second), Wait: time.Minute, Holder: "reporter/ip-10-0-2-13/17"},
		{Type: event.Waiting, Key: stuck, Owner: "reporter/ip-10-0-2-15/3", Lease: "w-2", TS: at(5 * time.Second), Holder: "reporter/ip-10-0-2-13/17"},
		// A deadlock: a holds x and waits for y, b holds y and waits for x.
		{Type: event.Acquired, Key: x, Owner: "transfer-a/ip-10-0-5-1/11", Lease: "l-a", TS: at(3 * time.Second), TTL: time.Minute, Attempts: 1},
		{Type: event.Acquired, Key: y, Owner: "transfer-b/ip-10-0-5-2/12", Lease: "l-b", TS: at(3 * time.Second), TTL: time.Minute, Attempts: 1},
		{Type: event.Waiting, Key: y, Owner: "transfer-a/ip-10-0-5-1/11", Lease: "l-a2", TS: at(2 * time.Second), Wait: 30 * time.Second, Holder: "transfer-b/ip-10-0-5-2/12", Reason: "l-a"},
		{Type: event.Waiting, Key: x, Owner: "transfer-b/ip-10-0-5-2/12", Lease: "l-b2", TS: at(2 * time.Second), Wait: 30 * time.Second, Holder: "transfer-a/ip-10-0-5-1/11", Reason: "l-b"},
		{Type: event.Acquired, Key: p + "sync:tenant-42", Owner: "sync-job/ip-10-0-4-9/7", Lease: "l-exp", TS: at(40 * time.Second), TTL: 2 * time.Second, Attempts: 1},
		{Type: event.Expired, Key: p + "sync:tenant-42", Owner: "sync-job/ip-10-0-4-9/7", Lease: "l-exp", TS: at(38 * time.Second), Hold: 2 * time.Second},
		{Type: event.Acquired, Key: p + "export:daily", Owner: "export-worker/pod-2", Lease: "l-f", TS: at(30 * time.Second), TTL: time.Minute, Attempts: 1},
		{Type: event.Forced, Key: p + "export:daily", Owner: "export-worker/pod-2", Lease: "l-f", TS: at(25 * time.Second), By: "oncall-ana", Reason: "hung"},
		{Type: event.Acquired, Key: p + "cfg:migrate", Owner: "migrator/pod-1", Lease: "l-nottl", TS: at(time.Minute), Attempts: 1},
		// An operator asked the stuck holder to release (issue 41).
		{Type: event.Requested, Key: stuck, Owner: "reporter/ip-10-0-2-13/17", Lease: "l-stuck", TS: at(time.Minute), By: "oncall-ana",
			Reason: "the nightly report blocks the deploy", Wait: 30 * time.Second, Count: 1},
	})
	// A lock-order inversion (/blocking's "Lock order"): checkout takes
	// order then inventory, restock inventory then order.
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: p + "order:5521", Owner: "checkout/pod-3", Lease: "l-o1", TS: at(50 * time.Minute), TTL: time.Minute, Attempts: 1},
		{Type: event.Acquired, Key: p + "stock:448", Owner: "checkout/pod-3", Lease: "l-o2", TS: at(50 * time.Minute), TTL: time.Minute, Attempts: 1, Reason: "l-o1"},
		{Type: event.Acquired, Key: p + "stock:9", Owner: "restock/job", Lease: "l-r1", TS: at(4 * time.Minute), TTL: time.Minute, Attempts: 1},
		{Type: event.Acquired, Key: p + "order:5522", Owner: "restock/job", Lease: "l-r2", TS: at(4 * time.Minute), TTL: time.Minute, Attempts: 1, Reason: "l-r1"},
	})
	f.agg.Tick()
	f.flushIncidents(t)
	held := f.pfx + "orders:7731"
	l := f.obtain(t, held, "billing-worker/ip-10-0-3-17/4242", time.Minute, false)
	t.Cleanup(func() { l.Release(context.Background()) })
	l.ReleaseRequested() // its key page offers "Ask to release…", and the ask confirmation
	f.waitListeners(t, held, 1)
	deaf := f.pfx + "orders:7732" // its key page says it cannot be asked
	f.obtain(t, deaf, "billing-worker/ip-10-0-3-18/99", time.Minute, false)
	pages = []string{"/", "/keys", "/keys?state=held&sort=key", keyPath(stuck), keyPath(x), keyPath(held), "/blocking", "/incidents",
		ownerPath("billing-worker/ip-10-0-3-17/4242"), "/no-such-page", "/classes", classPath("invoice:*")}
	operatorPages = []string{"/", keyPath(held), keyPath(held) + "/release", ownerPath("billing-worker/ip-10-0-3-17/4242"),
		askPath(held), keyPath(deaf)}
	return pages, operatorPages
}

// withToken serves h as an operator would see it: with the bearer token.
func withToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+testToken)
		h.ServeHTTP(w, r)
	})
}

// axeViolation is what axe-core reports per failed rule.
type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target  []any  `json:"target"`
		Summary string `json:"failureSummary"`
	} `json:"nodes"`
}

// TestPagesAccessible runs axe-core (WCAG 2 A and AA rules) in Chromium on
// every page, anonymous and operator, in light and dark colour schemes, at
// desktop and phone width.
func TestPagesAccessible(t *testing.T) {
	axeSrc, err := os.ReadFile(a11yTool(t, "axe-core/axe.min.js"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := redistest.Context(t) // the whole walk: no host is too slow for it
	f := newFixture(t, operatorOptions())
	pages, opPages := everyState(t, f)
	anon := httptest.NewServer(f.h)
	defer anon.Close()
	op := httptest.NewServer(withToken(f.h))
	defer op.Close()

	bctx := startBrowser(t, ctx)
	type target struct{ base, path string }
	var targets []target
	for _, p := range pages {
		targets = append(targets, target{anon.URL, p})
	}
	for _, p := range opPages {
		targets = append(targets, target{op.URL, p})
	}
	for _, scheme := range []string{"light", "dark"} {
		must(t, "emulate "+scheme, chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
			})
			return err
		})))
		for _, width := range []int64{1440, 390} {
			must(t, "viewport", chromedp.Do(bctx, chromedp.EmulateViewport(width, 900)))
			for _, tg := range targets {
				who := "anonymous"
				if tg.base == op.URL {
					who = "operator"
				}
				must(t, "open "+tg.path, chromedp.Do(bctx, chromedp.Navigate(tg.base+tg.path)))
				// The page's own scheme must follow the emulated one.
				dark, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`matchMedia('(prefers-color-scheme: dark)').matches`))
				must(t, "media query", err)
				if dark != (scheme == "dark") {
					t.Fatalf("prefers-color-scheme emulation did not take: dark=%v in %s", dark, scheme)
				}
				if scheme == "dark" && width == 1440 && who == "anonymous" && tg.path == "/" {
					saveShot(t, bctx, "dashboard-dark")
				}
				if _, err := chromedp.Run(bctx, chromedp.Evaluate[any](string(axeSrc)+";0")); err != nil {
					t.Fatalf("inject axe-core: %v", err)
				}
				res, err := chromedp.Run(bctx, chromedp.Evaluate[string](
					`axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}}).then(r => JSON.stringify(r.violations))`,
					chromedp.EvalAwaitPromise))
				must(t, "axe.run on "+tg.path, err)
				var vs []axeViolation
				if err := json.Unmarshal([]byte(res), &vs); err != nil {
					t.Fatalf("axe result: %v", err)
				}
				for _, v := range vs {
					var where []string
					for i, n := range v.Nodes {
						if i == 4 {
							where = append(where, fmt.Sprintf("… %d more", len(v.Nodes)-4))
							break
						}
						where = append(where, fmt.Sprintf("%v: %s", n.Target, strings.ReplaceAll(n.Summary, "\n", " ")))
					}
					t.Errorf("%s %s, %s, %d px: axe %s (%s) %q on %d nodes:\n  %s", who, tg.path, scheme, width, v.ID, v.Impact, v.Help, len(v.Nodes), strings.Join(where, "\n  "))
				}
			}
		}
	}
	// The checker is real: a low-contrast line added to a page is reported.
	must(t, "open /", chromedp.Do(bctx, chromedp.Navigate(anon.URL+"/")))
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[any](string(axeSrc)+";0")); err != nil {
		t.Fatalf("inject axe-core: %v", err)
	}
	res, err := chromedp.Run(bctx, chromedp.Evaluate[string](`
		const p = document.createElement('p'); // styled through the CSSOM: the CSP refuses style attributes
		p.id = 'faint'; p.textContent = 'faint text'; p.style.color = '#ccc'; p.style.background = '#fff';
		document.body.prepend(p);
		axe.run(document, {runOnly: {type: 'tag', values: ['wcag2aa']}}).then(r => r.violations.map(v => v.id + ':' + v.nodes.map(n => n.target.join(' ')).join('|')).join(','))`, chromedp.EvalAwaitPromise))
	must(t, "axe.run on a faulty page", err)
	if !strings.Contains(res, "color-contrast:#faint") {
		t.Errorf("axe-core missed a #ccc-on-white line: violations %q", res)
	}
}

// TestPagesValidHTML runs html-validate (its recommended rules) on every
// page as served, anonymous and operator.
func TestPagesValidHTML(t *testing.T) {
	bin := a11yTool(t, "html-validate/bin/html-validate.mjs")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed to run html-validate: %v (run scripts/deps.sh)", err)
	}
	f := newFixture(t, operatorOptions())
	pages, opPages := everyState(t, f)
	dir := t.TempDir()
	var files []string
	save := func(h http.Handler, who, path string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != 200 && path != "/no-such-page" {
			t.Fatalf("%s %s = %d", who, path, rec.Code)
		}
		name := filepath.Join(dir, fmt.Sprintf("%02d-%s%s.html", len(files), who, strings.NewReplacer("/", "_", "?", "_", "&", "_", "=", "_").Replace(path)))
		if err := os.WriteFile(name, rec.Body.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, name)
	}
	for _, p := range pages {
		save(f.h, "anonymous", p)
	}
	for _, p := range opPages {
		save(withToken(f.h), "operator", p)
	}
	cfg, err := filepath.Abs(filepath.Join(a11yTools, ".htmlvalidate.json"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, append([]string{bin, "--config", cfg, "--formatter", "text"}, files...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("html-validate found problems (%v):\n%s", err, out)
	}
	// The checker is real: a page with a known fault fails.
	bad := filepath.Join(dir, "bad.html")
	os.WriteFile(bad, []byte(`<!doctype html><html lang="en"><head><title>x</title></head><body><nav></nav><nav></nav><img src="x"></body></html>`), 0o644)
	if out, err := exec.Command(node, bin, "--config", cfg, bad).CombinedOutput(); err == nil {
		t.Errorf("html-validate passed a page with unlabelled landmarks and an image without alt:\n%s", out)
	}
}

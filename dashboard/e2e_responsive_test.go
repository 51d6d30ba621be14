package dashboard

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/redistest"
)

// TestPagesAtEveryWidth opens every page in Chromium at phone (360, 390),
// tablet, small laptop, desktop and wide-screen (2560) widths: the page never
// scrolls sideways (wide tables scroll inside their card) and every key
// column keeps at least 120 px.
func TestPagesAtEveryWidth(t *testing.T) {
	ctx := redistest.Context(t) // the whole walk: no host is too slow for it
	f := newFixture(t, operatorOptions())
	now := time.Now()
	// Keys go to this fixture's own aggregator only (no Redis key is
	// written), so they need no test prefix and the screenshots read well.
	long := "tenant:acme-industries:workflow:quarterly-close:step:reconcile-ledger-accounts"
	keys := []string{"invoice:1001", "cart:8f14e45f-ceea-467f-a0e6-1c2a3b4d5e6f", "inventory:sku-448", long}
	for i, k := range keys {
		f.agg.Apply(contended(k, 20+i, 40*time.Millisecond, now.Add(-30*time.Second)))
	}
	f.agg.Apply([]event.Event{{Type: event.Acquired, Key: long, Owner: "reconciler/ip-10-0-9-14/3131", Lease: "l-long", TS: now.Add(-2 * time.Second).UnixNano(), TTL: time.Hour, Attempts: 1}})
	f.agg.Tick()
	ts := httptest.NewServer(f.h)
	defer ts.Close()

	bctx := startBrowser(t, ctx)
	pages := []string{"/", "/keys", keyPath(long), "/blocking"}
	for _, w := range []int64{360, 390, 768, 1024, 1440, 2560} {
		for _, path := range pages {
			if _, err := chromedp.Run(bctx, chromedp.EmulateViewport(w, 900)); err != nil {
				t.Fatal(err)
			}
			if err := chromedp.Do(bctx, chromedp.Navigate(ts.URL+path)); err != nil {
				t.Fatalf("open %s: %v", path, err)
			}
			over, err := chromedp.Run(bctx, chromedp.Evaluate[float64](`document.documentElement.scrollWidth - window.innerWidth`))
			if err != nil {
				t.Fatal(err)
			}
			if over > 0 {
				wide, _ := chromedp.Run(bctx, chromedp.Evaluate[string](
					`[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest('.table-wrap')).slice(0, 5).map(e => e.tagName + '.' + e.className + '(' + Math.round(e.getBoundingClientRect().right) + ')').join(', ') || [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1).slice(0, 8).map(e => e.tagName + '.' + e.className + '(' + Math.round(e.getBoundingClientRect().right) + ')').join(', ')`))
				t.Errorf("%s at %d px scrolls sideways by %v px (too wide: %s)", path, w, over, wide)
			}
			narrow, err := chromedp.Run(bctx, chromedp.Evaluate[string](
				`[...document.querySelectorAll('td.key-cell')].map(td => td.getBoundingClientRect().width).filter(x => x < 120).join(',')`))
			if err != nil {
				t.Fatal(err)
			}
			if narrow != "" {
				t.Errorf("%s at %d px: key columns narrower than 120 px: %s", path, w, narrow)
			}
			if path == "/keys" && (w == 390 || w == 1440) {
				shot, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("keys-%dpx.png", w)
				if err := os.WriteFile(filepath.Join("..", "docs", name), shot, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// The full key stays reachable where it is cut: on hover (title).
	if err := chromedp.Do(bctx, chromedp.Navigate(ts.URL+"/keys")); err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(bctx, chromedp.Evaluate[string](
		`[...document.querySelectorAll('td.key-cell a')].map(a => a.getAttribute('title') || '').find(t => t.includes('reconcile-ledger-accounts')) || ''`))
	if err != nil || !strings.HasSuffix(title, "reconcile-ledger-accounts") {
		t.Errorf("the long key's full name is not in its link's title: %q, %v", title, err)
	}
}

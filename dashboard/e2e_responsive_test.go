package dashboard

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestPagesAtEveryWidth opens every page in Chromium at phone (360, 390),
// tablet, small laptop, desktop and wide-screen (2560) widths: the page never
// scrolls sideways (wide tables scroll inside their card, /keys becomes
// cards on a phone), every key column keeps at least 120 px, and no table
// cell but the key is cut short (cutCells). On a phone and a desktop every
// cell of /blocking's holders, the overview's hot keys and /incidents is on
// screen, not scrolled out of its card (offCells): before, at 390 px
// /blocking showed only Key and Holder, hot keys only Key and part of
// Class, /incidents Kind and Keys, and at 1440 px /incidents cut Detail.
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
	// What was cut at 1440 px: a passive lock without expiry (two badges),
	// a long owner; and a stuck lock, an expiry under a working holder and
	// one under a dead holder for the overview's side cards.
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: "report:nightly", Owner: "redis-py/report-builder-7d9f8c6b5-x2k4q", Lease: "p1", TS: now.Add(-20 * time.Second).UnixNano(), Passive: true, Attempts: 1},
		{Type: event.Acquired, Key: "export:tenant-42", Owner: "export-worker/pod-3f9c2-eu-west-1b", Lease: "e1", TS: now.Add(-10 * time.Minute).UnixNano(), TTL: 30 * time.Second, Attempts: 1},
		{Type: event.Renewed, Key: "export:tenant-42", Owner: "export-worker/pod-3f9c2-eu-west-1b", Lease: "e1", TS: now.Add(-time.Second).UnixNano(), TTL: 30 * time.Second},
		{Type: event.Acquired, Key: "invoice:batch-2", Owner: "billing-batch/pod-2", Lease: "b1", TS: now.Add(-90 * time.Second).UnixNano(), TTL: 10 * time.Second, Attempts: 1},
		{Type: event.Acquired, Key: "ledger:account-501", Owner: "ledger-sync/pod-1", Lease: "s1", TS: now.Add(-80 * time.Second).UnixNano(), TTL: 10 * time.Second, Attempts: 1},
		{Type: event.Lost, Key: "ledger:account-501", Owner: "ledger-sync/pod-1", Lease: "s1", TS: now.Add(-60 * time.Second).UnixNano(), Reason: "expired"},
		// A caller waits for the long key's holder: a row of /blocking.
		{Type: event.Waiting, Key: long, Owner: "ledger-close/ip-10-0-4-2/77", Lease: "w1", TS: now.Add(-time.Second).UnixNano(), Wait: time.Minute, Holder: "reconciler/ip-10-0-9-14/3131"},
		{Type: event.Forced, Key: "export:tenant-42", Owner: "export-worker/pod-3f9c2-eu-west-1b", Lease: "e1", TS: now.UnixNano(), By: "oncall-ana",
			Reason: "export wedged on a dead database connection after the failover of the primary in eu-west-1b, INC-2412"},
	})
	f.agg.Tick()
	if err := f.incidents.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(f.h)
	defer ts.Close()

	bctx := startBrowser(t, ctx)
	pages := []string{"/", "/keys", keyPath(long), "/blocking", "/incidents"}
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
			// The key page's timeline keeps its labels legible: 11 units of
			// its viewBox are at least 10 px on screen.
			if path == keyPath(long) {
				scale, err := chromedp.Run(bctx, chromedp.Evaluate[float64](
					`(() => { const s = document.querySelector('svg.tl'); return s ? 11 * s.getBoundingClientRect().width / s.viewBox.baseVal.width : 0 })()`))
				if err != nil || scale < 9.9 {
					t.Errorf("%s at %d px: timeline labels render at %.1f px (%v), want at least 10 px", path, w, scale, err)
				}
			}
			cut, err := chromedp.Run(bctx, chromedp.Evaluate[string](cutCells))
			if err != nil {
				t.Fatal(err)
			}
			if cut != "" {
				t.Errorf("%s at %d px: cells cut short: %s", path, w, cut)
			}
			if w <= 390 || w >= 1440 {
				off, err := chromedp.Run(bctx, chromedp.Evaluate[string](offCells))
				if err != nil {
					t.Fatal(err)
				}
				if off != "" {
					t.Errorf("%s at %d px: cells out of sight: %s", path, w, off)
				}
			}
			if path == "/keys" && (w == 390 || w == 1440) {
				shot, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
				if err != nil {
					t.Fatal(err)
				}
				writeDocShot(t, fmt.Sprintf("keys-%dpx", w), shot)
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

// cutCells lists the table cells, and the elements within them, whose
// content is wider than their box while they clip it (overflow other than
// visible, or an ellipsis): text cut short. The key itself (.key) is the
// one exception: it is cut with its full name on hover and on its page.
// Visually hidden text (.sr) clips by design. Empty when nothing is cut.
const cutCells = `(() => {
	const cut = [];
	for (const cell of document.querySelectorAll('td, th')) {
		for (const e of [cell, ...cell.querySelectorAll('*')]) {
			if (!(e instanceof HTMLElement) || e.closest('.key') || e.closest('.sr') || e.clientWidth === 0) continue;
			const cs = getComputedStyle(e);
			const clips = cs.overflowX !== 'visible' || cs.textOverflow === 'ellipsis';
			if (clips && e.scrollWidth > e.clientWidth + 1) {
				cut.push(e.tagName.toLowerCase() + '.' + [...e.classList].join('.') + ' "' + e.textContent.trim().slice(0, 40) + '" (' + e.scrollWidth + ' > ' + e.clientWidth + ')');
			}
		}
	}
	return cut.slice(0, 8).join('; ');
})()`

// offCells lists the cells of the tables on-call reads at a glance
// (/blocking's holders, the overview's hot keys, /incidents) that lie
// outside the viewport or their scrolling card: numbers out of sight.
// Empty when every cell is on screen.
const offCells = `(() => {
	const off = [];
	for (const row of document.querySelectorAll('[data-testid=blocking-row], [data-testid=hotkey-row], [data-testid=incident-row]')) {
		const wrap = row.closest('.table-wrap');
		const box = wrap ? wrap.getBoundingClientRect() : {left: 0, right: window.innerWidth};
		for (const td of row.children) {
			const r = td.getBoundingClientRect();
			if (r.width === 0) continue;
			if (r.left < Math.max(box.left, 0) - 1 || r.right > Math.min(box.right, window.innerWidth) + 1) {
				const label = td.dataset.label || td.className || 'cell';
				off.push(row.dataset.testid + ' ' + label + ' (' + Math.round(r.left) + '..' + Math.round(r.right) + ' of ' + Math.round(box.right) + ')');
			}
		}
	}
	return off.slice(0, 8).join('; ');
})()`

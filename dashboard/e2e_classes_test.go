package dashboard

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestClassesPagesInABrowser opens /classes and a class page in Chromium
// at a phone's width (390 px: the table becomes cards) and a desktop's
// (1440 px: a table): neither scrolls sideways, no cell but a key is cut
// short, and the table sorts and filters from its header and form.
func TestClassesPagesInABrowser(t *testing.T) {
	ctx := redistest.Context(t)
	f := newFixture(t, operatorOptions())
	now := time.Now()
	classWork(f, now)
	long := "tenant:acme-industries:workflow:quarterly-close:step:reconcile-ledger-accounts:2024"
	f.agg.Apply(contended(long, 12, 80*time.Millisecond, now.Add(-20*time.Second)))
	f.agg.Apply([]event.Event{{Type: event.Failed, Key: long, Owner: "reconciler/ip-10-0-9-14/3131", TS: now.Add(-5 * time.Second).UnixNano(),
		Wait: 2 * time.Second, Attempts: 9, Reason: event.ReasonCanceled}})
	f.agg.Tick()
	ts := httptest.NewServer(f.h)
	defer ts.Close()

	bctx := startBrowser(t, ctx)
	pages := []string{"/classes", "/classes/job:%2A", classPath("tenant:acme-industries:workflow:quarterly-close:step:reconcile-ledger-accounts:*")}
	for _, w := range []int64{390, 1440} {
		for _, path := range pages {
			must(t, "viewport", chromedp.Do(bctx, chromedp.EmulateViewport(w, 900)))
			must(t, "open "+path, chromedp.Do(bctx, chromedp.Navigate(ts.URL+path)))
			over, err := chromedp.Run(bctx, chromedp.Evaluate[float64](`document.documentElement.scrollWidth - window.innerWidth`))
			must(t, "scroll width", err)
			if over > 0 {
				t.Errorf("%s at %d px scrolls sideways by %v px", path, w, over)
			}
			cut, err := chromedp.Run(bctx, chromedp.Evaluate[string](cutCells))
			must(t, "cut cells", err)
			if cut != "" {
				t.Errorf("%s at %d px: cells cut short: %s", path, w, cut)
			}
			title, err := chromedp.Run(bctx, chromedp.Title())
			must(t, "title", err)
			if !strings.HasPrefix(title, "Class") {
				t.Errorf("%s at %d px: title %q, want a class page's or the classes page's", path, w, title)
			}
		}
		// The classes table: cards on a phone (no header row, each cell
		// under its label), a table of every column on a desktop.
		must(t, "open /classes", chromedp.Do(bctx, chromedp.Navigate(ts.URL+"/classes")))
		head, err := chromedp.Run(bctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('[data-testid=classes-table] thead')).display`))
		must(t, "header display", err)
		rows, err := chromedp.Run(bctx, chromedp.Evaluate[float64](`document.querySelectorAll('[data-testid=class-row]').length`))
		must(t, "rows", err)
		if wantHead := map[int64]string{390: "none", 1440: "table-header-group"}[w]; head != wantHead || rows != 4 {
			t.Errorf("/classes at %d px: header display %q, %v rows; want %q and 4", w, head, rows, wantHead)
		}
		if w == 390 {
			label, err := chromedp.Run(bctx, chromedp.Evaluate[string](
				`getComputedStyle(document.querySelector('[data-testid=class-row] [data-testid=held]'), '::before').content`))
			must(t, "card label", err)
			if label != `"Held"` {
				t.Errorf("/classes at 390 px: a card's cell is labelled %s, want \"Held\"", label)
			}
		}
		saveExtraShot(t, bctx, "classes-"+map[int64]string{390: "390", 1440: "1440"}[w]+"px")
	}

	// Sort from the header: by class name, ascending.
	must(t, "sort by class", chromedp.Do(bctx,
		chromedp.EmulateViewport(1440, 900),
		chromedp.Navigate(ts.URL+"/classes"),
		chromedp.Click(chromedp.CSS(`[data-testid=sort-class] a`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=sort-class][aria-sort=ascending]`)),
	))
	first, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`[data-testid=class-row] [data-testid=class-link]`)))
	must(t, "first row", err)
	if first != "invoice:*" {
		t.Errorf("sorted by class, the first row is %q, want invoice:*", first)
	}
	// Filter from the form: the classes whose name holds "leg".
	must(t, "filter", chromedp.Do(bctx,
		chromedp.SendKeys(chromedp.CSS(`[data-testid=search]`), "leg"),
		chromedp.Submit(chromedp.CSS(`[data-testid=search]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=search][value=leg]`)),
	))
	n, err := chromedp.Run(bctx, chromedp.Evaluate[float64](`document.querySelectorAll('[data-testid=class-row]').length`))
	must(t, "filtered rows", err)
	first, err = chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`[data-testid=class-row] [data-testid=class-link]`)))
	must(t, "filtered first row", err)
	if n != 1 || first != "legacy:report" {
		t.Errorf("filtered by \"leg\": %v rows, first %q; want legacy:report alone", n, first)
	}
}

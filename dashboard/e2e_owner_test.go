package dashboard

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestOwnerPageBrowser walks "a pod died holding its locks" in Chromium as
// an operator: from /keys to the owner's page, which fits a phone and a
// desktop (screenshots into docs/ at 390 and 1440 px), then "release all":
// the lock that changed hands meanwhile is reported and left alone, the
// others are released.
func TestOwnerPageBrowser(t *testing.T) {
	ctx := redistest.Context(t)
	// A Redis of its own: keys as an application names them, for the
	// screenshots.
	rdb := redistest.Start(t, redistest.Options{}).Client(t)
	agg := state.New(state.Config{})
	lc := lock.New(rdb, &lock.Options{Recorder: &applyRecorder{agg: agg}})
	const token = "owner-e2e-token"
	h, err := New(agg, lc, &Options{Token: token, TokenOperator: "oncall-ana", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	ts := httptest.NewServer(h)
	defer ts.Close()

	const dead = "billing-worker/pod-7f9c2-eu-west-1b"
	keys := []string{"cart:8f14e45f-ceea-467f", "export:tenant-42", "invoice:1001", "invoice:1002", "ledger:account-42", "report/daily/2026-03-01"}
	leases := map[string]*lock.Lease{}
	for i, k := range keys {
		l, err := lc.Obtain(ctx, k, time.Duration(30+30*i)*time.Second, &lock.ObtainOptions{Owner: dead, Fencing: true})
		if err != nil {
			t.Fatalf("Obtain(%q) = %v", k, err)
		}
		leases[k] = l
	}
	bystander, err := lc.Obtain(ctx, "invoice:1003", time.Minute, &lock.ObtainOptions{Owner: "billing-worker/pod-2"})
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Release(context.Background())

	bctx := startBrowser(t, ctx)
	_, err = chromedp.Call(bctx, network.Enable, network.EnableParams{})
	must(t, "network.enable", err)
	_, err = chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": "Bearer " + token},
	})
	must(t, "set operator header", err)

	// From /keys, the owner cell leads to the owner's page.
	must(t, "open keys", chromedp.Do(bctx, chromedp.Navigate(ts.URL+"/keys?state=held&sort=key")))
	must(t, "follow the owner link", chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`a[data-testid="owner-link"][href="`+ownerPath(dead)+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="owner-release-form"]`)),
	))
	name, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`[data-testid="owner-name"]`)))
	must(t, "read the owner", err)
	if name != dead {
		t.Errorf("owner page names %q, want %q", name, dead)
	}
	listed, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('[data-testid="owner-key"]')].map(a => a.textContent)`))
	must(t, "read the listed keys", err)
	if !slices.Equal(listed, keys) {
		t.Errorf("owner page lists %q, want %q", listed, keys)
	}
	for _, w := range []int64{390, 1440} {
		_, err := chromedp.Run(bctx, chromedp.EmulateViewport(w, 900))
		must(t, "resize", err)
		must(t, "reload", chromedp.Do(bctx, chromedp.Navigate(ts.URL+ownerPath(dead))))
		over, err := chromedp.Run(bctx, chromedp.Evaluate[float64](`document.documentElement.scrollWidth - window.innerWidth`))
		must(t, "measure", err)
		if over > 0 {
			t.Errorf("owner page at %d px scrolls sideways by %v px", w, over)
		}
		cut, err := chromedp.Run(bctx, chromedp.Evaluate[string](cutCells))
		must(t, "look for cut cells", err)
		if cut != "" {
			t.Errorf("owner page at %d px: cells cut short: %s", w, cut)
		}
		saveShot(t, bctx, "owner-"+strconv.FormatInt(w, 10)+"px")
	}

	// While the operator types the reason, invoice:1002's holder finishes
	// and another pod takes it.
	if err := leases["invoice:1002"].Release(ctx); err != nil {
		t.Fatal(err)
	}
	successor, err := lc.Obtain(ctx, "invoice:1002", time.Minute, &lock.ObtainOptions{Owner: "billing-worker/pod-3"})
	if err != nil {
		t.Fatal(err)
	}
	defer successor.Release(context.Background())
	must(t, "release all", chromedp.Do(bctx,
		chromedp.SendKeys(chromedp.CSS(`[data-testid="reason"]`), "pod OOM-killed, its locks outlive it, INC-3107"),
		chromedp.Click(chromedp.CSS(`[data-testid="confirm-release-all"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="owner-result"]`)),
	))
	outcomes, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('[data-testid="owner-result-row"]')].map(r => r.querySelector('[data-testid="owner-result-key"]').textContent + " " + r.dataset.outcome)`))
	must(t, "read the results", err)
	var want []string
	for _, k := range keys {
		if k == "invoice:1002" {
			want = append(want, k+" changed")
		} else {
			want = append(want, k+" released")
		}
	}
	if !slices.Equal(outcomes, want) {
		t.Errorf("release-all results = %q, want %q", outcomes, want)
	}
	summary, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`[data-testid="owner-summary"]`)))
	must(t, "read the summary", err)
	if !strings.HasPrefix(summary, "5 released, 1 skipped (holder changed), 0 skipped (already free); recorded as forced by oncall-ana") {
		t.Errorf("summary = %q", summary)
	}
	saveExtraShot(t, bctx, "owner-result")

	for _, k := range keys {
		h, err := lc.Inspect(ctx, k)
		switch {
		case k == "invoice:1002":
			if err != nil || h.Owner != "billing-worker/pod-3" {
				t.Errorf("Inspect(%q) = %+v, %v; want the successor untouched", k, h, err)
			}
		case err == nil:
			t.Errorf("Inspect(%q) after release-all = %+v, want it released", k, h)
		}
	}
	if h, err := lc.Inspect(ctx, "invoice:1003"); err != nil || h.Owner != "billing-worker/pod-2" {
		t.Errorf("Inspect(invoice:1003) = %+v, %v; want another owner's lock untouched", h, err)
	}
}

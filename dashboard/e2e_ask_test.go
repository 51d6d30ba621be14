package dashboard

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestAskInBrowser walks "a colleague holds the edit lock" in Chromium as
// an operator: the key page offers "Ask to release…" beside "Force
// release…", the confirmation takes a reason and a grace, and the holder
// hears the request; a holder that does not listen shows a disabled
// "Cannot be asked" with why; the owner page's "Ask all" asks its
// listening holders.
func TestAskInBrowser(t *testing.T) {
	ctx := redistest.Context(t)
	rdb := redistest.Start(t, redistest.Options{}).Client(t)
	agg := state.New(state.Config{})
	lc := lock.New(rdb, &lock.Options{Recorder: &applyRecorder{agg: agg}})
	const token = "ask-e2e-token"
	h, err := New(agg, lc, &Options{Token: token, TokenOperator: "bob", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	ts := httptest.NewServer(h)
	defer ts.Close()

	obtain := func(key, owner string, listen bool) (*lock.Lease, <-chan lock.ReleaseRequest) {
		l, err := lc.Obtain(ctx, key, 30*time.Second, &lock.ObtainOptions{Owner: owner})
		if err != nil {
			t.Fatalf("Obtain(%q) = %v", key, err)
		}
		t.Cleanup(func() { l.Release(context.Background()) })
		if !listen {
			return l, nil
		}
		asks := l.ReleaseRequested()
		redistest.WaitFor(t, 15*time.Second, "the holder's subscription", func() bool {
			hd, err := lc.Inspect(ctx, key)
			n, _ := lc.Listeners(ctx, hd)
			return err == nil && n == 1
		})
		return l, asks
	}
	_, carol := obtain("workflow:42", "editor/carol", true)
	obtain("workflow:43", "editor/old-app", false)
	_, b1 := obtain("batch:1", "batch/7", true)
	_, b2 := obtain("batch:2", "batch/7", true)

	bctx := startBrowser(t, ctx)
	_, err = chromedp.Call(bctx, network.Enable, network.EnableParams{})
	must(t, "network.enable", err)
	_, err = chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": "Bearer " + token},
	})
	must(t, "set operator header", err)

	must(t, "ask from the key page", chromedp.Do(bctx,
		chromedp.Navigate(ts.URL+keyPath("workflow:42")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="release-link"]`)),
		chromedp.Click(chromedp.CSS(`[data-testid="ask-link"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="ask-form"]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid="reason"]`), "I need to edit the workflow"),
		chromedp.SendKeys(chromedp.CSS(`[data-testid="grace"]`), "30s"),
		chromedp.Click(chromedp.CSS(`[data-testid="confirm-ask"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="ask-result"]`)),
	))
	outcome, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="ask-result"]').dataset.outcome`))
	must(t, "read the outcome", err)
	if outcome != "asked" {
		t.Errorf("ask outcome = %q, want asked", outcome)
	}
	select {
	case r := <-carol:
		if r.Operator != "bob" || r.Reason != "I need to edit the workflow" || r.Grace != 30*time.Second {
			t.Errorf("carol heard %+v, want bob's request with its reason and a 30s grace", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("carol heard no request")
	}

	must(t, "open a key whose holder does not listen", chromedp.Do(bctx,
		chromedp.Navigate(ts.URL+keyPath("workflow:43")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="ask-cannot"]`)),
	))
	why, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`[data-testid="ask-cannot-why"]`)))
	must(t, "read why", err)
	disabled, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.querySelector('[data-testid="ask-cannot"]').disabled && !document.querySelector('[data-testid="ask-link"]')`))
	must(t, "read the button", err)
	if !disabled || !strings.Contains(why, "does not listen for release requests") {
		t.Errorf("a holder that does not listen: button disabled and no link = %v, why = %q", disabled, why)
	}

	must(t, "ask all on the owner page", chromedp.Do(bctx,
		chromedp.Navigate(ts.URL+ownerPath("batch/7")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="confirm-ask-all"]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid="reason"]`), "draining batch/7"),
		chromedp.Click(chromedp.CSS(`[data-testid="confirm-ask-all"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="owner-ask-result"]`)),
	))
	outcomes, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('[data-testid="owner-result-row"]')].map(r => r.querySelector('[data-testid="owner-result-key"]').textContent + " " + r.dataset.outcome)`))
	must(t, "read the results", err)
	if want := []string{"batch:1 asked", "batch:2 asked"}; !slices.Equal(outcomes, want) {
		t.Errorf("ask-all results = %q, want %q", outcomes, want)
	}
	for i, ch := range []<-chan lock.ReleaseRequest{b1, b2} {
		select {
		case r := <-ch:
			if r.Reason != "draining batch/7" {
				t.Errorf("batch:%d heard %+v", i+1, r)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("batch:%d heard no request", i+1)
		}
	}
	for _, k := range []string{"workflow:42", "batch:1", "batch:2"} {
		if _, err := lc.Inspect(ctx, k); err != nil {
			t.Errorf("Inspect(%q) after asking = %v: asking must not release", k, err)
		}
	}
}

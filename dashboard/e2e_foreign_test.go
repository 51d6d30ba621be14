package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/lockscope/lockscope/collector"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestForeignLocksInBrowser: other libraries' locks, watched passively, seen
// in Chromium. An anonymous visitor sees a redis-py lock named by library
// and fingerprint, never its token, and its wait as unknown; a lock without
// expiry carries a warning; an operator releasing a constant value without
// expiry must tick that whoever holds it is released — the form will not go
// without it.
func TestForeignLocksInBrowser(t *testing.T) {
	ctx := redistest.Context(t) // the whole walk: no host is too slow for it
	rdb := redistest.Start(t, redistest.Options{}).Client(t)
	agg := state.New(state.Config{})
	col := collector.New(rdb, agg, &collector.Options{Block: 100 * time.Millisecond, Watch: []string{"py:*", "flag:*"}, WatchNoTTL: true})
	colCtx, stopCollector := context.WithCancel(ctx)
	colDone := make(chan error, 1)
	go func() { colDone <- col.Run(colCtx) }()
	defer func() { stopCollector(); <-colDone }()
	h, err := New(agg, lock.New(rdb, nil), &Options{Token: "e2e-token", TokenOperator: "oncall-ana"})
	if err != nil {
		t.Fatal(err)
	}
	var posts atomic.Int64 // the form submissions the server got
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()

	const pyKey, pyToken = "py:invoice-7", "5f0c6e1aa7e211ef9c2b0242ac120002"
	const flagKey = "flag:deploy"
	bctx := startBrowser(t, ctx)
	must(t, "start browser", chromedp.Do(bctx, chromedp.EmulateViewport(1280, 900)))
	// The collector's watch is subscribed once its rescan has run: locks
	// taken after that are seen being acquired.
	redistest.WaitFor(t, 30*time.Second, "the watched redis-py lock seen held", func() bool {
		if d, ok := agg.Lock(pyKey); ok && d.Held {
			return true
		}
		rdb.SetNX(ctx, pyKey, pyToken, time.Minute)
		rdb.SetNX(ctx, flagKey, "1", 0)
		return false
	})

	// Anonymous: the key page names the holder, never the token.
	must(t, "open the redis-py lock", chromedp.Do(bctx,
		chromedp.Navigate(ts.URL+keyPath(pyKey)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="holder-owner"]`)),
	))
	owner, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`[data-testid="holder-owner"]`)))
	must(t, "read holder", err)
	if want := lock.ForeignOwner(pyToken); !strings.Contains(owner, want) {
		t.Errorf("holder = %q, want %q", owner, want)
	}
	html, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	must(t, "read page", err)
	if strings.Contains(html, pyToken) {
		t.Errorf("the key page shows redis-py's token %s to an anonymous visitor", pyToken)
	}
	wait, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`[data-testid="wait-dist-empty"]`)))
	must(t, "read wait card", err)
	if !strings.Contains(wait, "Unknown") {
		t.Errorf("wait card of a passive lock = %q, want it unknown", wait)
	}

	// The lock without expiry carries its warning on /keys.
	must(t, "open keys", chromedp.Do(bctx, chromedp.Navigate(ts.URL+"/keys")))
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](
		`[...document.querySelectorAll('[data-testid="no-expiry"]')].some(b => b.closest('tr').textContent.includes(`+jsString(flagKey)+`))`,
		chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	must(t, "no-expiry warning on /keys", err)

	// Operator: the release of "1" without expiry needs the box ticked.
	_, err = chromedp.Call(bctx, network.Enable, network.EnableParams{})
	must(t, "network.enable", err)
	_, err = chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": "Bearer e2e-token"},
	})
	must(t, "set operator header", err)
	must(t, "open the confirmation", chromedp.Do(bctx,
		chromedp.Navigate(ts.URL+releasePath(flagKey)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="ambiguous-warning"]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid="reason"]`), "deploy flag left by a crashed job"),
		chromedp.Click(chromedp.CSS(`[data-testid="confirm-release"]`)),
	))
	// Not submitted: the server counts one POST, the ticked one, at the end.
	if n, _ := rdb.Exists(ctx, flagKey).Result(); n != 1 {
		t.Fatal("released without the box ticked")
	}
	valid, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.querySelector('[data-testid="release-form"]').checkValidity()`))
	must(t, "form validity", err)
	if valid {
		t.Error("the form is valid without the box ticked")
	}
	must(t, "tick and confirm", chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`[data-testid="accept-ambiguous"]`)),
		chromedp.Click(chromedp.CSS(`[data-testid="confirm-release"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="release-result"]`)),
	))
	outcome, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(`[data-testid="release-result"]`), "data-outcome"))
	must(t, "read outcome", err)
	if outcome.Value != "released" {
		t.Errorf("release outcome = %q, want released", outcome.Value)
	}
	if n, _ := rdb.Exists(ctx, flagKey).Result(); n != 0 {
		t.Error("the key is still there after the release")
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("the server got %d form submissions, want 1: the form went without the box ticked", n)
	}
}

package dashboard

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/lockscope/lockscope/collector"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// chromiumPath is Debian's chromium. A missing browser fails the test: the
// end-to-end check is part of the suite, not optional.
const chromiumPath = "/usr/bin/chromium"

// TestEndToEndBrowser runs a real contended workload through the real event
// path (lock.Client → Emitter → Redis stream → collector → dashboard), then
// drives headless Chromium: the overview shows the hot key, a click opens
// its detail, and a forced release with a reason deletes the Redis key while
// the renewing holder sees the loss. It saves docs/dashboard.png. Every
// lock call runs in a trace (Options.TraceContext), and the dashboard links
// trace ids to a tracing backend (Options.TraceURL): docs/blocking.png
// shows the links.
func TestEndToEndBrowser(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("headless browser needed for the end-to-end test: %v (apt-get install chromium)", err)
	}
	testStart := time.Now()
	ctx := redistest.Context(t) // the whole walk: no host is too slow for it

	// A Redis of its own, so keys need no test prefix and the screenshot
	// shows keys as an application would name them.
	rdb := redistest.Start(t, redistest.Options{}).Client(t)

	// The real event path.
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{FlushInterval: 20 * time.Millisecond})
	lc := lock.New(rdb, &lock.Options{Owner: "e2e", Recorder: em, TraceContext: e2eTraceOf})
	// The aggregator's clock is shifted into the past while a history is
	// applied, so the overview's sparklines have ten minutes to draw; the
	// live workload below, not this history, is what the test checks.
	var shift atomic.Int64
	shift.Store(int64(historyStart))
	clock := func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
	incidents := collector.NewIncidentStore(rdb, event.DefaultStream, nil)
	agg := state.New(state.Config{StuckAfter: 2 * time.Second, Now: clock, Incidents: incidents})
	col := collector.New(rdb, agg, &collector.Options{Block: 100 * time.Millisecond})
	colCtx, stopCollector := context.WithCancel(ctx)
	colDone, incDone := make(chan error, 1), make(chan error, 1)
	go func() { colDone <- col.Run(colCtx) }()
	go func() { incDone <- incidents.Run(colCtx) }()
	defer func() {
		stopCollector()
		if err := <-colDone; err != nil {
			t.Errorf("collector Run() = %v", err)
		}
		<-incDone
		em.Close(context.Background())
	}()

	const token = "e2e-token"
	h, err := New(agg, lc, &Options{Token: token, TokenOperator: "oncall-ana", TraceURL: e2eTraceURL, Incidents: incidents})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	ts := httptest.NewServer(h)
	defer ts.Close()

	// The workload: a holder that keeps renewing a hot key, callers that keep
	// being refused by it, and a mix of ordinary contended work.
	keys := []string{"invoice:1001", "invoice:1002", "cart:8f14e45f-ceea-467f-a0e6-1c2a3b4d5e6f", "report/daily/2026-03-01", "inventory:sku-448"}
	owners := []string{"invoicer/ip-10-0-2-11/88", "cart-svc/ip-10-0-2-12/91", "reporter/ip-10-0-2-13/17"}
	history(agg, &shift, keys, owners)

	hot := "orders:hot:7731"
	// Renewed every second: a loaded host keeps it through the walk.
	holder, err := lc.Obtain(ctx, hot, 3*time.Second, &lock.ObtainOptions{AutoRenew: true, Owner: "billing-worker/ip-10-0-3-17/4242", Fencing: true})
	if err != nil {
		t.Fatalf("Obtain(%q) = %v", hot, err)
	}
	defer holder.Release(context.Background())

	hotCtx, stopHot := context.WithCancel(ctx)
	workCtx, stopWork := context.WithCancel(ctx)
	var hotWG, workWG sync.WaitGroup
	defer func() { stopHot(); stopWork(); hotWG.Wait(); workWG.Wait() }()
	for i := range 3 {
		hotWG.Go(func() {
			owner := "checkout-api/ip-10-0-1-" + strconv.Itoa(20+i) + "/31"
			for hotCtx.Err() == nil {
				if l, _, err := lc.Try(hotCtx, hot, time.Second, &lock.ObtainOptions{Owner: owner}); err == nil {
					l.Release(context.Background())
				}
				redistest.Sleep(hotCtx, 40*time.Millisecond)
			}
		})
	}
	for i := range 6 {
		workWG.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			owner := owners[i%3]
			for workCtx.Err() == nil {
				key := keys[min(rng.IntN(8), len(keys)-1)] // skewed to the last key
				octx, cancel := context.WithTimeout(e2eTrace(workCtx, e2eRandomTrace()), 250*time.Millisecond)
				l, err := lc.Obtain(octx, key, 2*time.Second, &lock.ObtainOptions{Owner: owner, Retry: lock.LinearBackoff(5 * time.Millisecond)})
				cancel()
				if err == nil {
					redistest.Sleep(workCtx, time.Duration(5+rng.IntN(25))*time.Millisecond)
					l.Release(context.Background())
				}
				redistest.Sleep(workCtx, time.Duration(rng.IntN(20))*time.Millisecond)
			}
		})
	}
	// A lock whose holder died: its TTL lapses while held.
	if _, err := lc.Obtain(ctx, "sync:tenant-42", 300*time.Millisecond, &lock.ObtainOptions{Owner: "sync-job/ip-10-0-4-9/7"}); err != nil {
		t.Fatalf("Obtain(expiring) = %v", err)
	}

	// The browser.
	bctx := startBrowser(t, ctx)

	// Start the browser before anything else uses the context: two
	// concurrent first uses would each launch one.
	must(t, "start browser", chromedp.Do(bctx, chromedp.EmulateViewport(1280, 900)))

	// Page errors and CSP violations fail the test.
	var consoleMu sync.Mutex
	var problems []string
	console := chromedp.Console(bctx)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError || strings.Contains(m.Text, "Content Security Policy") {
				consoleMu.Lock()
				problems = append(problems, m.String())
				consoleMu.Unlock()
			}
		}
	}()

	_, err = chromedp.Call(bctx, network.Enable, network.EnableParams{})
	must(t, "network.enable", err)
	_, err = chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": "Bearer " + token},
	})
	must(t, "set operator header", err)

	// Refresh every 2 s, then open the overview and wait for the hot key.
	must(t, "open overview", chromedp.Do(bctx, chromedp.Navigate(ts.URL+"/")))
	_, err = chromedp.Run(bctx, chromedp.Evaluate[chromedp.Void](`localStorage.setItem("lockscope.live", JSON.stringify({paused:false, interval:2}))`))
	must(t, "set refresh interval", err)
	shownAt := time.Now()
	must(t, "reload overview", chromedp.Do(bctx, chromedp.Navigate(ts.URL+"/?window=1m&by=contentions")))
	hotHref := keyPath(hot)
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](
		`[...document.querySelectorAll('[data-testid="hotkey-row"]')].slice(0, 3).some(r => r.querySelector('a').getAttribute('href') === `+jsString(hotHref)+`)`,
		chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	if err != nil {
		rows, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`[...document.querySelectorAll('[data-testid="hotkey-row"]')].map(r => r.innerText).join("\n")`))
		t.Fatalf("hot key %q not among the top 3 on the overview within 30 s: %v; rows:\n%s", hot, err, rows)
	}
	t.Logf("hot key shown %v after opening the overview", time.Since(shownAt).Round(time.Millisecond))

	// Live refresh swaps the content in place; pausing stops it and persists.
	liveStatus := func() string {
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("live-status").textContent`))
		must(t, "read live status", err)
		return s
	}
	if got := liveStatus(); got != "live · 2 s" {
		t.Errorf("live status = %q, want %q", got, "live · 2 s")
	}
	_, err = chromedp.Run(bctx, chromedp.Evaluate[chromedp.Void](`window.__marker = document.getElementById("content"); window.__rendered = document.querySelector('[data-testid="rendered"]').textContent`))
	must(t, "mark content", err)
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("content") !== window.__marker`,
		chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	must(t, "content refreshed in place", err)
	// The footer's "rendered" time follows the refresh (it is outside #content).
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.querySelector('[data-testid="rendered"]').textContent !== window.__rendered`,
		chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	must(t, "footer's rendered time follows the live refresh", err)
	must(t, "pause", chromedp.Do(bctx, chromedp.Click(chromedp.ID("live-toggle"))))
	if got := liveStatus(); got != "paused" {
		t.Errorf("live status after pause = %q, want paused", got)
	}
	stored, err := chromedp.Run(bctx, chromedp.Evaluate[string](`localStorage.getItem("lockscope.live")`))
	must(t, "read stored live settings", err)
	if stored != `{"paused":true,"interval":2}` {
		t.Errorf("stored live settings = %q, want paused with interval 2", stored)
	}
	must(t, "resume", chromedp.Do(bctx, chromedp.Click(chromedp.ID("live-toggle"))))

	// Let the holder become stuck and the orphan expire, so the screenshot
	// shows every part of the overview, then save it.
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](
		`document.querySelectorAll('[data-testid="stuck-row"]').length > 0 && document.querySelectorAll('[data-testid="expiration-row"]').length > 0`,
		// No bound but the test's: how soon the collector's scan declares
		// the expiry is not what this test is about, and a loaded host
		// delays it.
		chromedp.WithPollingTimeout(0), chromedp.WithPollingInterval(100*time.Millisecond)))
	must(t, "stuck lock and expiration on the overview", err)
	shot, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
	must(t, "screenshot", err)
	writeDocShot(t, "dashboard", shot)
	saveExtraShot(t, bctx, "overview")

	// Click through to the key.
	must(t, "click hot key", chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`[data-testid="hotkey-row"] a[href="`+hotHref+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="key-title"]`)),
	))
	title, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`[data-testid="key-title"]`)))
	must(t, "read key title", err)
	if title != hot {
		t.Errorf("detail page title = %q, want %q", title, hot)
	}
	owner, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`[data-testid="holder-owner"]`)))
	must(t, "read holder", err)
	if !strings.Contains(owner, "billing-worker/ip-10-0-3-17/4242") {
		t.Errorf("detail holder = %q, want billing-worker/ip-10-0-3-17/4242", owner)
	}
	saveExtraShot(t, bctx, "key")

	// Force-release it with a reason.
	must(t, "open confirmation", chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`[data-testid="release-link"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="release-form"]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid="reason"]`), "worker wedged on a dead DB connection, INC-2412"),
	))
	saveExtraShot(t, bctx, "confirm")
	// The refused callers stop here, so nobody takes the key right after the release.
	stopHot()
	hotWG.Wait()
	released := time.Now()
	must(t, "confirm release", chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`[data-testid="confirm-release"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="release-result"]`)),
	))
	outcome, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(`[data-testid="release-result"]`), "data-outcome"))
	must(t, "read outcome", err)
	if outcome.Value != "released" {
		t.Errorf("release outcome = %q, want released", outcome.Value)
	}
	saveExtraShot(t, bctx, "result")

	if n, err := rdb.Exists(ctx, hot).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS %q after the release = %d, %v, want 0", hot, n, err)
	}
	select {
	case <-holder.Context().Done():
		t.Logf("holder saw the loss %v after the release (err %v)", time.Since(released).Round(time.Millisecond), holder.Err())
		if !errors.Is(holder.Err(), lock.ErrLost) {
			t.Errorf("holder Err() = %v, want lock.ErrLost", holder.Err())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("holder's context not cancelled 30 s after the forced release (it renews every second)")
	}

	// The release went through the event stream: the overview lists it.
	must(t, "back to the overview", chromedp.Do(bctx, chromedp.Navigate(ts.URL+"/")))
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](
		`[...document.querySelectorAll('[data-testid="forced-row"]')].some(r => r.textContent.includes("oncall-ana") && r.textContent.includes("INC-2412"))`,
		chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	must(t, "forced release listed on the overview", err)

	// A deadlock between two services (nested Do): the banner names both
	// owners and keys, with a forced release of each for the operator; the
	// blocking page shows the cycle; a key page lists its waiter.
	ledger, account := "payments:ledger", "payments:account-42"
	both := make(chan struct{})
	var dl, dlReady sync.WaitGroup
	dlReady.Add(2)
	// The waits last until the walk has seen the cycle on both pages (or a
	// minute): a loaded host shows it late, never misses it.
	deadlocked, endDeadlock := context.WithCancel(ctx)
	defer endDeadlock()
	// Each service's request is a trace of its own.
	traces := map[string]event.TraceID{"payments-api": mustTrace(t, "4bf92f3577b34da6a3ce929d0e0e4736"), "ledger-sync": mustTrace(t, "0af7651916cd43dd8448eb211c80319c")}
	for _, p := range [][3]string{{"payments-api/ip-10-0-5-1/12", ledger, account}, {"ledger-sync/ip-10-0-5-2/40", account, ledger}} {
		tr := traces[strings.Split(p[0], "/")[0]]
		dl.Go(func() {
			c := lock.New(rdb, &lock.Options{Owner: p[0], Recorder: em, TraceContext: e2eTraceOf})
			c.Do(e2eTrace(ctx, tr), p[1], 10*time.Second, nil, func(ctx context.Context) error {
				dlReady.Done()
				<-both
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				stop := context.AfterFunc(deadlocked, cancel)
				defer stop()
				_, err := c.Obtain(wctx, p[2], 10*time.Second, &lock.ObtainOptions{Retry: lock.LinearBackoff(20 * time.Millisecond)})
				return err
			})
		})
	}
	dlReady.Wait()
	close(both)
	formed := time.Now()
	must(t, "open blocking page", chromedp.Do(bctx, chromedp.Navigate(ts.URL+"/blocking")))
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](
		`(() => { const b = document.querySelector('[data-testid="deadlock-banner"]'); return !!b && b.textContent.includes("payments-api") && b.textContent.includes("ledger-sync") && b.querySelectorAll('[data-testid="deadlock-release"]').length === 2 && document.querySelectorAll('[data-testid="blocking-row"]').length >= 2 })()`,
		chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	if err != nil {
		body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("content").innerText`))
		t.Fatalf("deadlock not shown on /blocking within 30 s: %v\n%s", err, body)
	}
	t.Logf("deadlock shown in the browser %v after it formed", time.Since(formed).Round(time.Millisecond))
	// Each holder links to the trace that holds its lock, and each link
	// of the cycle to its wait's trace: the same request's.
	links, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('[data-testid="blocking-row"]')].filter(r => r.textContent.includes("payments:")).map(r => r.querySelector('[data-testid="blocking-key"]').textContent + " " + (r.querySelector('[data-testid="blocking-trace-link"]') || {}).href)`))
	must(t, "read the holders' trace links", err)
	slices.Sort(links)
	wantLinks := []string{account + " " + e2eTraceLink(traces["ledger-sync"]), ledger + " " + e2eTraceLink(traces["payments-api"])}
	if !slices.Equal(links, wantLinks) {
		t.Errorf("/blocking holders' trace links = %q, want %q", links, wantLinks)
	}
	saveShot(t, bctx, "blocking")
	must(t, "open a deadlocked key", chromedp.Do(bctx, chromedp.Navigate(ts.URL+keyPath(ledger))))
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.querySelectorAll('[data-testid="waiter-row"]').length === 1 && document.querySelector('[data-testid="waiter-row"]').textContent.includes("ledger-sync")`,
		chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	must(t, "the key page lists its waiter", err)
	keyLinks, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`["holder-trace-link", "waiter-trace-link"].map(id => (document.querySelector('[data-testid="' + id + '"]') || {}).href)`))
	must(t, "read the key page's trace links", err)
	if want := []string{e2eTraceLink(traces["payments-api"]), e2eTraceLink(traces["ledger-sync"])}; !slices.Equal(keyLinks, want) {
		t.Errorf("%s: holder's and waiter's trace links = %q, want %q", ledger, keyLinks, want)
	}
	endDeadlock()
	dl.Wait()

	// The incident history lists what the walk went through: the stuck
	// hold, the forced release, the deadlock once it broke.
	must(t, "open incidents", chromedp.Do(bctx, chromedp.Navigate(ts.URL+"/incidents")))
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`(() => {
		const rows = [...document.querySelectorAll('[data-testid="incident-row"]')];
		const ended = k => rows.some(r => r.dataset.kind === k && r.querySelector('[data-testid="incident-end"]').textContent.trim() !== "open");
		return ended("deadlock") && ended("forced") && rows.some(r => r.dataset.kind === "stuck");
	})()`, chromedp.WithPollingTimeout(time.Minute), chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil {
		body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("content").innerText`))
		t.Fatalf("/incidents does not list the ended deadlock, the forced release and the stuck hold within a minute: %v\n%s", err, body)
	}
	saveShot(t, bctx, "incidents")

	if os.Getenv("LOCKSCOPE_SHOTS") != "" {
		must(t, "open keys", chromedp.Do(bctx, chromedp.Navigate(ts.URL+"/keys")))
		saveExtraShot(t, bctx, "keys")
	}

	consoleMu.Lock()
	defer consoleMu.Unlock()
	if len(problems) > 0 {
		t.Errorf("browser console reported problems:\n%s", strings.Join(problems, "\n"))
	}
	t.Logf("end-to-end test took %v", time.Since(testStart).Round(time.Millisecond))
}

// e2eTraceURL is the tracing backend the walk's dashboard links to.
const e2eTraceURL = "https://tempo.example.com/trace/{trace_id}"

func e2eTraceLink(tr event.TraceID) string {
	return strings.ReplaceAll(e2eTraceURL, "{trace_id}", tr.String())
}

type e2eTraceKey struct{}

// e2eTrace returns ctx in the trace tr: the walk's stand-in for an
// application's OpenTelemetry span, read by e2eTraceOf.
func e2eTrace(ctx context.Context, tr event.TraceID) context.Context {
	return context.WithValue(ctx, e2eTraceKey{}, tr)
}

// e2eTraceOf is the walk's lock.Options.TraceContext.
func e2eTraceOf(ctx context.Context) (event.TraceID, event.SpanID) {
	tr, ok := ctx.Value(e2eTraceKey{}).(event.TraceID)
	if !ok {
		return event.TraceID{}, event.SpanID{}
	}
	return tr, event.SpanID{0: 0x51, 7: 1}
}

func e2eRandomTrace() event.TraceID {
	var tr event.TraceID
	binary.BigEndian.PutUint64(tr[:8], rand.Uint64()|1)
	binary.BigEndian.PutUint64(tr[8:], rand.Uint64())
	return tr
}

func mustTrace(t *testing.T, s string) event.TraceID {
	t.Helper()
	tr, ok := event.ParseTraceID(s)
	if !ok {
		t.Fatalf("ParseTraceID(%q) failed", s)
	}
	return tr
}

// historyStart is how far back history begins.
const historyStart = -9*time.Minute - 30*time.Second

// history applies ten minutes of past activity to agg, moving its clock
// along, and leaves the clock at the present.
func history(agg *state.Aggregator, shift *atomic.Int64, keys, owners []string) {
	const step = 2 * time.Second
	defer shift.Store(0)
	for d, i := historyStart, 0; d < -70*time.Second; d, i = d+step, i+1 {
		shift.Store(int64(d))
		at := time.Now().Add(d)
		n := 36 + int(14*math.Sin(float64(i)/14)+7*math.Sin(float64(i)/5)) // acquisitions per step, ~18/s
		var evs []event.Event
		for j := range max(n, 1) {
			key, owner := keys[(i+j)%len(keys)], owners[(i*7+j)%len(owners)]
			lease := "h-" + strconv.Itoa(i) + "-" + strconv.Itoa(j)
			ts := at.Add(time.Duration(j) * step / time.Duration(n+1))
			var wait time.Duration
			if (i+j)%3 == 0 {
				wait = time.Duration(2+(i*j)%40) * time.Millisecond
			}
			hold := time.Duration(5+(i*3+j*11)%60) * time.Millisecond
			evs = append(evs,
				event.Event{Type: event.Acquired, Key: key, Owner: owner, Lease: lease, TS: ts.UnixNano(), Wait: wait, Attempts: 1 + int(wait/(5*time.Millisecond)), TTL: 2 * time.Second},
				event.Event{Type: event.Released, Key: key, Owner: owner, Lease: lease, TS: ts.Add(hold).UnixNano(), Hold: hold})
		}
		agg.Apply(evs)
	}
}

// saveExtraShot saves a full-page screenshot into $LOCKSCOPE_SHOTS, when set,
// for reviewing the pages' design.
func saveExtraShot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("LOCKSCOPE_SHOTS")
	if dir == "" {
		return
	}
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644)
}

// must fails the test when a browser step failed.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// startBrowser starts headless Chromium for the test; it ends with ctx or
// the test.
func startBrowser(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("headless browser needed for the end-to-end test: %v (apt-get install chromium)", err)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	return bctx
}

func jsString(s string) string { return strconv.Quote(s) } // keyPath output is ASCII

// saveShot takes a screenshot of the viewport: into docs/ (README.md and docs/reference.md show
// them) when asked for (writeDocShot), and into LOCKSCOPE_SHOTS when set.
func saveShot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	b, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	writeDocShot(t, name, b)
	saveExtraShot(t, ctx, name)
}

// writeDocShot writes a screenshot to docs/NAME.png only when
// LOCKSCOPE_UPDATE_SCREENSHOTS=1 (make screenshots): a test run leaves the
// tracked pictures alone.
func writeDocShot(t *testing.T, name string, png []byte) {
	t.Helper()
	if os.Getenv("LOCKSCOPE_UPDATE_SCREENSHOTS") != "1" {
		return
	}
	if err := os.WriteFile(filepath.Join("..", "docs", name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

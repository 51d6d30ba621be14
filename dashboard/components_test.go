package dashboard

import (
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/keytext"
)

// hostileKeys are keys an application may legally use and a dashboard may
// easily get wrong.
func hostileKeys() []string {
	return []string{
		"plain:key",
		"a/b/c",
		"what?x=1&y=2",
		"100%",
		"%2F",
		"frag#ment",
		"new\nline",
		"<script>alert('x')</script>",
		`quote"and'apos`,
		"..",
		".",
		"spaces and\ttabs",
		"bad\xff\xfeutf8",
		strings.Repeat("k", 400), // long: the longest keys tracked (state.MaxKeyBytes) less room for a test prefix
		"日本語/ключ",
		"+plus+",
	}
}

func testPage() page {
	return page{Title: "T", Nav: "overview", Nonce: "n0nce", Live: true, Clock: "12:00:00"}
}

func TestLayoutReadOnlyBannerAndNonce(t *testing.T) {
	p := testPage()
	p.ReadOnly = true
	doc := renderHTML(t, errorPage(errorView{Page: p, Status: 403, Message: "nope"}))
	if got := text(one(t, doc, "readonly-banner")); !strings.Contains(got, "Read-only") {
		t.Errorf("readonly banner = %q, want it to say Read-only", got)
	}
	scripts := byTag(doc, "script")
	if len(scripts) != 1 {
		t.Fatalf("script tags: %d, want 1", len(scripts))
	}
	if got := attr(scripts[0], "nonce"); got != "n0nce" {
		t.Errorf("script nonce = %q, want %q", got, "n0nce")
	}
	if !hasAttr(one(t, doc, "live-controls"), "hidden") {
		t.Errorf("live controls are visible without JavaScript, want hidden until the script shows them")
	}
	if got := text(one(t, doc, "error-message")); got != "nope" {
		t.Errorf("error message = %q, want %q", got, "nope")
	}

	p.ReadOnly = false
	p.Operator = "alice"
	doc = renderHTML(t, errorPage(errorView{Page: p, Status: 404, Message: "x"}))
	if n := len(byTestID(doc, "readonly-banner")); n != 0 {
		t.Errorf("readonly banners with credentials: %d, want 0", n)
	}
	if got := text(one(t, doc, "operator")); got != "alice" {
		t.Errorf("operator = %q, want %q", got, "alice")
	}
}

func TestKeyLinkEscapesHostileKeys(t *testing.T) {
	for _, key := range hostileKeys() {
		cell := newKeyCell(key)
		doc := renderHTML(t, keyLink(cell, "k"))
		a := one(t, doc, "k")
		if got, want := attr(a, "href"), keyPath(key); got != want {
			t.Errorf("href for %.40q = %.60q, want %.60q", key, got, want)
		}
		full, _ := keytext.Visible(key)
		if got := attr(a, "title"); got != full {
			t.Errorf("title for %.40q = %.60q, want the full display key", key, got)
		}
		if got := rawText(a); got != keytext.Cut(full, keyCellMax) {
			t.Errorf("text for %.40q = %.60q, want %.60q", key, got, keytext.Cut(full, keyCellMax))
		}
		if n := len(byTag(doc, "script")); n != 0 {
			t.Errorf("key %.40q produced %d script elements", key, n)
		}
	}
}

func TestOverviewComponent(t *testing.T) {
	v := overviewView{
		Page: testPage(),
		Tiles: []statTile{
			{ID: "held", Label: "Held now", Value: "42", Href: "/keys?held=1"},
			{ID: "stuck", Label: "Stuck", Value: "3", Href: "#stuck", Tone: "bad"},
		},
		Window: "5m", By: "contentions",
		WindowTabs: []tab{{Label: "1m", Href: "/?window=1m"}, {Label: "5m", Href: "/?window=5m", Active: true}},
		Hot: []hotRow{
			{Rank: 1, Key: newKeyCell("orders:1"), Class: "orders:*", Contentions: "1,200", Bar: "100"},
			{Rank: 2, Key: newKeyCell("<b>x</b>"), Class: "other", Contentions: "7", Bar: "1", Approx: "2"},
		},
		StuckTotal: 1,
		Stuck:      []stuckRow{{Key: newKeyCell("job:9"), Owner: newOwnerCell("w1"), HeldFor: "12m00s"}},
	}
	doc := renderHTML(t, overviewPage(v))
	held := one(t, doc, "stat-held")
	if got := attr(held, "href"); got != "/keys?held=1" {
		t.Errorf("held tile links to %q, want /keys?held=1", got)
	}
	if got := text(one(t, held, "value")); got != "42" {
		t.Errorf("held tile value = %q, want 42", got)
	}
	if got := attr(one(t, doc, "stat-stuck"), "class"); !strings.Contains(got, "tile-bad") {
		t.Errorf("stuck tile class = %q, want tile-bad", got)
	}
	rows := byTestID(doc, "hotkey-row")
	if len(rows) != 2 {
		t.Fatalf("hot key rows = %d, want 2", len(rows))
	}
	if got := attr(one(t, rows[0], "hotkey-link"), "href"); got != "/keys/orders:1" {
		t.Errorf("first hot key href = %q, want /keys/orders:1", got)
	}
	if got := text(one(t, rows[1], "hotkey-link")); got != "<b>x</b>" {
		t.Errorf("second hot key text = %q, want the key as text", got)
	}
	if n := len(byTag(rows[1], "b")); n != 0 {
		t.Errorf("hot key markup became %d <b> elements", n)
	}
	if got := text(one(t, rows[1], "hotkey-contentions")); got != "≈ 7" {
		t.Errorf("approximate contentions = %q, want %q", got, "≈ 7")
	}
	if got := attr(one(t, doc, "window-5m"), "class"); got != "on" {
		t.Errorf("5m tab class = %q, want on", got)
	}
	if n := len(byTestID(doc, "stuck-row")); n != 1 {
		t.Errorf("stuck rows = %d, want 1", n)
	}
}

func TestKeysComponentEmptyAndPager(t *testing.T) {
	v := keysView{Page: testPage(), Total: "0", From: "0", To: "0", PageN: 1, Pages: 1, Empty: "No tracked key matches these filters.",
		Sorts: []tab{{Label: "contentions", Active: true}, {Label: "wait"}}, Classes: []string{"a:*", "b:*"}, Class: "b:*"}
	doc := renderHTML(t, keysPage(v))
	if got := text(one(t, doc, "empty")); got != v.Empty {
		t.Errorf("empty text = %q, want %q", got, v.Empty)
	}
	if n := len(byTestID(doc, "next")); n != 0 {
		t.Errorf("next links on the only page = %d, want 0", n)
	}
	var selected []string
	for _, o := range byTag(one(t, doc, "class"), "option") {
		if hasAttr(o, "selected") {
			selected = append(selected, attr(o, "value"))
		}
	}
	if len(selected) != 1 || selected[0] != "b:*" {
		t.Errorf("selected classes = %q, want [b:*]", selected)
	}
}

func TestReleaseConfirmComponent(t *testing.T) {
	v := releaseView{
		Page: testPage(), Key: newKeyCell("k\n1"), Fingerprint: "abc123", Action: releasePath("k\n1"), MaxReason: MaxReason, Back: keyPath("k\n1"),
		Holder: holderView{Owner: newOwnerCell("worker-7"), HeldFor: "3m12s", Waiters: "4", Fingerprint: "abc123"},
	}
	doc := renderHTML(t, releaseConfirm(v))
	form := one(t, doc, "release-form")
	if got := attr(form, "method"); got != "post" {
		t.Errorf("form method = %q, want post", got)
	}
	if got := attr(form, "action"); got != "/keys/k%0A1/release" {
		t.Errorf("form action = %q, want /keys/k%%0A1/release", got)
	}
	var fp string
	for _, in := range byTag(form, "input") {
		if attr(in, "name") == "fingerprint" {
			fp = attr(in, "value")
		}
	}
	if fp != "abc123" {
		t.Errorf("posted fingerprint = %q, want abc123", fp)
	}
	reason := one(t, doc, "reason")
	if !hasAttr(reason, "required") || attr(reason, "maxlength") != "500" {
		t.Errorf("reason field attrs = %v, want required and maxlength=500", reason.Attr)
	}
	if got := text(one(t, doc, "confirm-key")); got != `k\n1` {
		t.Errorf("confirm key = %q, want the escaped display", got)
	}
	if got := text(one(t, doc, "holder-waiters")); got != "4" {
		t.Errorf("waiters = %q, want 4", got)
	}
}

func TestDistribution(t *testing.T) {
	d := state.Distribution{
		Bounds: []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second},
		Counts: []int64{0, 90, 10, 0, 0},
		Sum:    900 * time.Millisecond,
		Count:  100,
	}
	v := newDist("Wait", "wait", d)
	if v.P50 != "≤ 10ms" || v.P99 != "≤ 100ms" || v.Max != "" {
		t.Errorf("without a largest observation p50, p99, max = %q, %q, %q, want ≤ 10ms, ≤ 100ms, none", v.P50, v.P99, v.Max)
	}
	// With it, quantiles are interpolated within their bucket and never
	// exceed it: the 50th of 90 waits between 1 and 10 ms is at 6 ms, and
	// the 99th (the last of the 10–100 ms bucket) is no more than the
	// largest wait, 40 ms, not the bucket's bound.
	d.Max = 40 * time.Millisecond
	v = newDist("Wait", "wait", d)
	if v.P50 != "≈ 6ms" || v.P99 != "≈ 40ms" || v.Max != "40ms" {
		t.Errorf("p50, p99, max = %q, %q, %q, want ≈ 6ms, ≈ 40ms, 40ms", v.P50, v.P99, v.Max)
	}
	if v.Mean != "9ms" {
		t.Errorf("mean = %q, want 9ms", v.Mean)
	}
	doc := renderHTML(t, distCard(v, "d"))
	bars := findAll(doc, func(n *html.Node) bool { return n.Data == "rect" })
	if len(bars) != len(v.Bars) || len(bars) < 3 {
		t.Fatalf("rects = %d, bars = %d, want equal and at least 3", len(bars), len(v.Bars))
	}
	var hot int
	for _, b := range bars {
		if strings.Contains(attr(b, "class"), "dist-p99") {
			hot++
		}
	}
	if hot != 1 {
		t.Errorf("bars marked p99 = %d, want 1", hot)
	}
	// Labelled axes: the count scale up to the tallest bar (90), and what
	// the buckets measure with its unit.
	var ticks []string
	for _, n := range byTestID(doc, "y-tick") {
		ticks = append(ticks, text(n))
	}
	if !slices.Equal(ticks, []string{"0", "45", "90"}) {
		t.Errorf("y axis ticks = %q, want 0, 45, 90", ticks)
	}
	if x, y := text(one(t, doc, "x-title")), text(one(t, doc, "y-title")); x != "wait time (bucket upper bound)" || y != "calls" {
		t.Errorf("axis titles = %q, %q", x, y)
	}
	var labels []string
	for _, n := range findAll(doc, func(n *html.Node) bool { return n.Data == "text" && attr(n, "text-anchor") == "middle" }) {
		labels = append(labels, text(n))
	}
	if len(labels) == 0 || !strings.HasSuffix(labels[0], "ms") && !strings.HasSuffix(labels[0], "s") {
		t.Errorf("x axis bucket labels %q carry no unit", labels)
	}
	if e := newDist("Hold", "hold", state.Distribution{}); !e.Empty {
		t.Errorf("empty distribution not marked empty")
	}
}

func TestTimeline(t *testing.T) {
	now := time.Unix(1000, 0)
	at := func(s float64) int64 { return now.Add(time.Duration(s * float64(time.Second))).UnixNano() }
	// newest first, as KeyDetail.Recent
	evs := []event.Event{
		{Type: event.Failed, Owner: "c", TS: at(-2), Reason: "timeout"},
		{Type: event.Acquired, Owner: "b", Lease: "L2", TS: at(-5)},
		{Type: event.Released, Owner: "a", Lease: "L1", TS: at(-6), Hold: 4 * time.Second},
		{Type: event.Acquired, Owner: "a", Lease: "L1", TS: at(-10)},
	}
	v := newTimeline(evs, now, nil, nil)
	if len(v.Lanes) != 3 { // failed tries, a, b
		t.Errorf("lanes = %d, want 3", len(v.Lanes))
	}
	if len(v.Spans) != 2 {
		t.Fatalf("spans = %d, want 2 (a's closed hold, b's open hold)", len(v.Spans))
	}
	open := 0
	for _, s := range v.Spans {
		if s.Open {
			open++
		}
	}
	if open != 1 {
		t.Errorf("open spans = %d, want 1", open)
	}
	if len(v.Marks) != 4 {
		t.Errorf("marks = %d, want 4", len(v.Marks))
	}
	if got := v.Ticks[len(v.Ticks)-1].Label; got != "now" {
		t.Errorf("last tick = %q, want now", got)
	}
	// A holder whose acquisition left the recent events still gets its span.
	v = newTimeline(evs[:1], now, &tlHolder{Owner: "b", Lease: "L2", Since: now.Add(-time.Hour)}, nil)
	if len(v.Spans) != 1 || !v.Spans[0].Open || v.Spans[0].X != f1(tlLabelW) {
		t.Errorf("holder span = %+v, want one open span from the left edge", v.Spans)
	}
	if e := newTimeline(nil, now, nil, nil); !e.Empty {
		t.Errorf("no events: timeline not empty")
	}
}

func TestSpark(t *testing.T) {
	if sp := newSpark([]float64{1}, 100, 20, fmtRate, "x"); sp != nil {
		t.Errorf("newSpark(one point) = %+v, want nil", sp)
	}
	sp := newSpark([]float64{0, 5, 10}, 100, 20, fmtRate, "x")
	if sp.Last != "10" || sp.Max != "10" {
		t.Errorf("spark last, max = %q, %q, want 10, 10", sp.Last, sp.Max)
	}
	if pts := strings.Fields(sp.Line); len(pts) != 3 || pts[0] != "0.0,18.5" || pts[2] != "100.0,1.5" {
		t.Errorf("spark points = %q, want 3 points from bottom-left to top-right", sp.Line)
	}
}

func TestTrimSeries(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		min  int
		want []float64
	}{
		{[]float64{1, 2}, 2, nil},
		{[]float64{0, 0, 0, 0, 3, 4, 1}, 2, []float64{3, 4}},
		{[]float64{0, 0, 0, 0, 3, 4, 1}, 4, []float64{0, 0, 3, 4}},
		{[]float64{0, 0, 0, 0}, 2, []float64{0, 0}},
		{[]float64{5, 0, 6, 9}, 2, []float64{5, 0, 6}},
	} {
		if got := trimSeries(c.in, c.min); !slices.Equal(got, c.want) {
			t.Errorf("trimSeries(%v, %d) = %v, want %v", c.in, c.min, got, c.want)
		}
	}
}

package dashboard

import (
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/lockscope/lockscope/event"
)

func traceN(n byte) event.TraceID { return event.TraceID{0: 0x4b, 7: 0xf9, 15: n} }

// traceScene applies, under prefix pfx: A holds a (trace 1), B holds b
// (trace 2) and waits for a (trace 3), C waits for b untraced: the chain
// C -> B -> A.
func traceScene(f *fixture) (a, b string) {
	a, b = f.pfx+"orders:1", f.pfx+"orders:2"
	now := time.Now()
	at := func(d time.Duration) int64 { return now.Add(d - 10*time.Second).UnixNano() }
	acq := func(key, owner, lease string, tr event.TraceID, ts int64) event.Event {
		return event.Event{Type: event.Acquired, Key: key, Owner: owner, Lease: lease, TS: ts, TTL: time.Minute, Attempts: 1, TraceID: tr, SpanID: event.SpanID{7: 1}}
	}
	wait := func(key, owner, lease, holder string, tr event.TraceID, ts int64, holds ...string) event.Event {
		return event.Event{Type: event.Waiting, Key: key, Owner: owner, Lease: lease, Holder: holder, TS: ts, Attempts: 1,
			Wait: time.Minute, Reason: event.JoinLeases(holds), TraceID: tr}
	}
	f.agg.Apply([]event.Event{
		acq(a, "A", "LA", traceN(1), at(0)),
		acq(b, "B", "LB", traceN(2), at(time.Second)),
		wait(a, "B", "WB", "A", traceN(3), at(2*time.Second), "LB"),
		wait(b, "C", "WC", "B", event.TraceID{}, at(3*time.Second)),
	})
	return a, b
}

func hrefs(nodes []*html.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, attr(n, "href"))
	}
	return out
}

// TestTraceLinks checks that with Options.TraceURL the trace ids the
// collector keeps link into the tracing backend: the holder's, each
// waiter's and each recent event's on the key page; the holders' and the
// chains' links' on /blocking; and that the JSON API gives the same ids.
func TestTraceLinks(t *testing.T) {
	const tmpl = "https://traces.example.com/explore?trace={trace_id}&org=1"
	link := func(n byte) string { return strings.ReplaceAll(tmpl, "{trace_id}", traceN(n).String()) }
	f := newFixture(t, &Options{TraceURL: tmpl})
	a, b := traceScene(f)

	doc := htmlDoc(t, f.do(t, req{target: keyPath(a)}))
	h := one(t, doc, "holder-trace-link")
	if got := attr(h, "href"); got != link(1) {
		t.Errorf("holder's trace link = %q, want %q", got, link(1))
	}
	if got := text(h); got != traceN(1).String() {
		t.Errorf("holder's trace link text = %q, want the whole id %s", got, traceN(1))
	}
	if got := hrefs(byTestID(doc, "waiter-trace-link")); !slices.Equal(got, []string{link(3)}) {
		t.Errorf("waiters' trace links = %q, want B's %q", got, link(3))
	}
	if got := hrefs(byTestID(doc, "event-trace-link")); !slices.Equal(got, []string{link(3), link(1)}) {
		t.Errorf("recent events' trace links = %q, want the waiting's then the acquisition's, newest first", got)
	}

	doc = htmlDoc(t, f.do(t, req{target: keyPath(b)}))
	if n := len(byTestID(doc, "waiter-row")); n != 1 {
		t.Fatalf("%d waiter rows on b, want C's", n)
	}
	if n := len(byTestID(doc, "waiter-trace-link")) + len(byTestID(doc, "waiter-trace")); n != 0 {
		t.Errorf("C's untraced wait shows %d trace ids, want none", n)
	}

	doc = htmlDoc(t, f.do(t, req{target: "/blocking"}))
	got := hrefs(byTestID(doc, "blocking-trace-link"))
	slices.Sort(got)
	if want := []string{link(1), link(2)}; !slices.Equal(got, want) {
		t.Errorf("/blocking holders' trace links = %q, want %q", got, want)
	}
	var chain []string
	for _, c := range byTestID(doc, "chain") {
		if strings.HasPrefix(text(c), "C ") {
			chain = hrefs(byTestID(c, "chain-trace-link"))
		}
	}
	if want := []string{link(3), link(1)}; !slices.Equal(chain, want) {
		t.Errorf("chain C -> B -> A trace links = %q, want B's wait's then A's hold's %q", chain, want)
	}

	// The JSON API: the same ids, as 32 hex digits.
	d := decodeJSON[apiLockDetail](t, f.do(t, req{target: apiLockPath(a)}))
	if d.TraceID != traceN(1).String() {
		t.Errorf("lock a trace_id = %q, want %s", d.TraceID, traceN(1))
	}
	if len(d.WaitersNow) != 1 || d.WaitersNow[0].TraceID != traceN(3).String() {
		t.Errorf("lock a waiters_now = %+v, want B's with trace_id %s", d.WaitersNow, traceN(3))
	}
	var recent []string
	for _, e := range d.Recent {
		recent = append(recent, e.TraceID)
	}
	if want := []string{traceN(3).String(), traceN(1).String()}; !slices.Equal(recent, want) {
		t.Errorf("lock a recent trace_ids = %q, want %q", recent, want)
	}
	bl := decodeJSON[apiBlocking](t, f.do(t, req{target: "/api/v1/blocking"}))
	byKey := map[string]string{}
	for _, h := range bl.Holders {
		byKey[h.Key] = h.TraceID
	}
	if byKey[a] != traceN(1).String() || byKey[b] != traceN(2).String() {
		t.Errorf("blocking holders' trace_ids = %v, want a: %s, b: %s", byKey, traceN(1), traceN(2))
	}
	var links []string
	for _, c := range bl.Chains {
		if len(c.Links) == 3 {
			for _, l := range c.Links {
				links = append(links, l.TraceID)
			}
		}
	}
	if want := []string{"", traceN(3).String(), traceN(1).String()}; !slices.Equal(links, want) {
		t.Errorf("chain C -> B -> A trace_ids = %q, want %q", links, want)
	}
	page := decodeJSON[apiLockPage](t, f.do(t, req{target: "/api/v1/locks?q=" + f.pfx + "orders:1"}))
	if len(page.Locks) != 1 || page.Locks[0].TraceID != traceN(1).String() {
		t.Errorf("/api/v1/locks = %+v, want a with trace_id %s", page.Locks, traceN(1))
	}

	// A deadlock: A, holding a, waits for b (trace 4). Its members carry
	// their waits' ids.
	f.agg.Apply([]event.Event{{Type: event.Waiting, Key: b, Owner: "A", Lease: "WA", Holder: "B", TS: time.Now().UnixNano(), Attempts: 1,
		Wait: time.Minute, Reason: event.JoinLeases([]string{"LA"}), TraceID: traceN(4)}})
	bl = decodeJSON[apiBlocking](t, f.do(t, req{target: "/api/v1/blocking"}))
	members := map[string]string{}
	for _, c := range bl.Deadlocks {
		for _, m := range c {
			members[m.Owner] = m.TraceID
		}
	}
	if members["A"] != traceN(4).String() || members["B"] != traceN(3).String() {
		t.Errorf("deadlock members' trace_ids = %v, want A: %s, B: %s", members, traceN(4), traceN(3))
	}
}

// TestTraceIDsWithoutURL checks that without Options.TraceURL the ids are
// shown as text, never as links.
func TestTraceIDsWithoutURL(t *testing.T) {
	f := newFixture(t, nil)
	a, _ := traceScene(f)
	doc := htmlDoc(t, f.do(t, req{target: keyPath(a)}))
	if got := text(one(t, doc, "holder-trace")); got != traceN(1).String() {
		t.Errorf("holder's trace = %q, want %s", got, traceN(1))
	}
	if n := len(byTestID(doc, "event-trace")); n != 2 {
		t.Errorf("%d recent events show a trace id, want 2", n)
	}
	for _, page := range []string{keyPath(a), "/blocking"} {
		doc := htmlDoc(t, f.do(t, req{target: page}))
		for _, n := range findAll(doc, func(n *html.Node) bool { return strings.HasSuffix(attr(n, "data-testid"), "trace-link") }) {
			t.Errorf("%s: trace link %q without a trace URL", page, attr(n, "href"))
		}
		if n := len(byTestID(doc, "blocking-trace")) + len(byTestID(doc, "holder-trace")); n == 0 {
			t.Errorf("%s shows no trace id", page)
		}
	}
}

func TestCheckTraceURL(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"https://tempo.example.com/trace/{trace_id}", true},
		{"http://127.0.0.1:16686/trace/{trace_id}", true},
		{"https://grafana.example.com/explore?left={%22queries%22:[{%22query%22:%22{trace_id}%22}]}", true},
		{"https://jaeger.example.com/trace/", false},          // no {trace_id}
		{"https://jaeger.example.com/trace/{traceid}", false}, // misspelt
		{"javascript:alert('{trace_id}')", false},
		{"ftp://example.com/{trace_id}", false},
		{"/trace/{trace_id}", false}, // relative: would link into the dashboard
		{"https:///trace/{trace_id}", false},
		{"https://exa mple.com/{trace_id}", false},
	} {
		err := CheckTraceURL(tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("CheckTraceURL(%q) = %v, want ok %v", tc.url, err, tc.ok)
		}
	}
	f := newFixture(t, nil)
	if _, err := New(f.agg, nil, &Options{TraceURL: "javascript:{trace_id}"}); err == nil || !strings.Contains(err.Error(), "http") {
		t.Errorf("New(TraceURL javascript:) = %v, want an error saying http(s) only", err)
	}
}

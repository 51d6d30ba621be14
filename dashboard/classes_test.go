package dashboard

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// classWork applies, at now, a workload whose class figures are known:
// invoice:* has 6 acquisitions (4 of them waited 200 ms), 2 timeouts and a
// refused try, holds of 50 ms under TTLs of 5 s; job:* 20 holds of 4.5 s
// under 5 s TTLs, which ttl_short reports; a watched class of unknown waits.
func classWork(f *fixture, now time.Time) {
	var evs []event.Event
	ts := func(d time.Duration) int64 { return now.Add(-30*time.Second + d).UnixNano() }
	for i := range 6 {
		key, lease := fmt.Sprintf("invoice:%d", i%2), fmt.Sprintf("i%d", i)
		attempts, wait := 1, time.Millisecond
		if i < 4 {
			attempts, wait = 3, 200*time.Millisecond
		}
		at := time.Duration(i) * 100 * time.Millisecond
		evs = append(evs,
			event.Event{Type: event.Acquired, Key: key, Owner: "billing", Lease: lease, TS: ts(at), Wait: wait, Attempts: attempts, TTL: 5 * time.Second},
			event.Event{Type: event.Released, Key: key, Owner: "billing", Lease: lease, TS: ts(at + 50*time.Millisecond), Hold: 50 * time.Millisecond})
	}
	evs = append(evs,
		event.Event{Type: event.Failed, Key: "invoice:1", Owner: "api", TS: ts(time.Second), Wait: 300 * time.Millisecond, Attempts: 4, Reason: event.ReasonTimeout},
		event.Event{Type: event.Failed, Key: "invoice:1", Owner: "api", TS: ts(time.Second), Wait: 300 * time.Millisecond, Attempts: 4, Reason: event.ReasonTimeout},
		event.Event{Type: event.Failed, Key: "invoice:1", Owner: "api", TS: ts(time.Second), Attempts: 1, Reason: event.ReasonHeld})
	for i := range 20 {
		key, lease := fmt.Sprintf("job:%d", i), fmt.Sprintf("j%d", i)
		evs = append(evs,
			event.Event{Type: event.Acquired, Key: key, Owner: "cron", Lease: lease, TS: ts(2 * time.Second), Attempts: 1, TTL: 5 * time.Second},
			event.Event{Type: event.Released, Key: key, Owner: "cron", Lease: lease, TS: ts(6500 * time.Millisecond), Hold: 4500 * time.Millisecond})
	}
	evs = append(evs, event.Event{Type: event.Acquired, Key: "legacy:report", Owner: "redis-py", Lease: "p", TS: ts(time.Second), Attempts: 1,
		TTL: 30 * time.Second, Passive: true})
	f.agg.Apply(evs)
}

func TestClassesAPICountsKnownWork(t *testing.T) {
	f := newFixture(t, nil)
	classWork(f, time.Now())
	rec := f.do(t, req{target: "/api/v1/classes?sort=class"})
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /api/v1/classes = %d %s", rec.Code, rec.Body)
	}
	v := decodeJSON[apiClasses](t, rec)
	var names []string
	for _, c := range v.Classes {
		names = append(names, c.Class)
	}
	if want := []string{"invoice:*", "job:*", "legacy:report"}; v.Window != "5m" || !slices.Equal(names, want) {
		t.Fatalf("GET /api/v1/classes = window %q, classes %q; want 5m, %q", v.Window, names, want)
	}
	inv := v.Classes[0]
	ratio := 6.0 / 9
	wantFail := map[string]int64{"timeout": 2, "canceled": 0, "error": 0, "held": 1}
	if inv.Acquisitions != 6 || inv.Contentions != 5 || fmt.Sprint(inv.Failures) != fmt.Sprint(wantFail) ||
		inv.SuccessRatio == nil || *inv.SuccessRatio != ratio || !inv.WaitsKnown || inv.Wait == nil ||
		inv.Wait.Count != 9 || inv.Wait.Max != 0.3 || inv.Hold.Count != 6 || inv.Hold.Avg != 0.05 || inv.Hold.Max != 0.05 ||
		!slices.Equal(inv.TTLSeconds, []float64{5}) || len(inv.TTLs) != 1 || inv.TTLs[0].Acquisitions != 6 ||
		inv.Held != 0 || inv.Waiters != 0 || inv.Expirations != 0 || inv.Stuck != 0 || inv.HotKey != "invoice:1" || inv.Advice != 0 ||
		inv.Href != "/classes/invoice:%2A" {
		t.Errorf("invoice:* = %+v (wait %+v); want 6 acquisitions, 5 contentions, failures %v, success %v, 9 waits up to 0.3 s, "+
			"6 holds of 0.05 s, TTL 5 s ×6, hot key invoice:1, no advice, href /classes/invoice:%%2A", inv, inv.Wait, wantFail, ratio)
	}
	if p := inv.Wait.P99; p < 0.2 || p > 0.3 {
		t.Errorf("invoice:* wait p99 = %v, want within [0.2, 0.3]", p)
	}
	if job := v.Classes[1]; job.Advice != 1 || job.Hold.Count != 20 || job.Hold.Max != 4.5 {
		t.Errorf("job:* = %+v; want 20 holds of 4.5 s and 1 advice", job)
	}
	if legacy := v.Classes[2]; legacy.WaitsKnown || legacy.Wait != nil || legacy.Passive != 1 || legacy.Held != 1 {
		t.Errorf("legacy:report = %+v; want waits unknown (wait null), 1 passive acquisition held", legacy)
	}
	// Filters and order.
	v = decodeJSON[apiClasses](t, f.do(t, req{target: "/api/v1/classes?advice=1"}))
	if len(v.Classes) != 1 || v.Classes[0].Class != "job:*" {
		t.Errorf("GET /api/v1/classes?advice=1 = %+v; want job:* only", v.Classes)
	}
	v = decodeJSON[apiClasses](t, f.do(t, req{target: "/api/v1/classes?q=oice&window=1h"}))
	if len(v.Classes) != 1 || v.Classes[0].Class != "invoice:*" || v.Window != "1h" || v.Classes[0].Acquisitions != 6 {
		t.Errorf("GET /api/v1/classes?q=oice&window=1h = %+v; want invoice:* with its 6 acquisitions", v)
	}
	v = decodeJSON[apiClasses](t, f.do(t, req{target: "/api/v1/classes?sort=contentions"}))
	if len(v.Classes) != 3 || v.Classes[0].Class != "invoice:*" {
		t.Errorf("sort=contentions: first %q, want invoice:*", v.Classes[0].Class)
	}
	for _, bad := range []string{"window=2m", "sort=nope", "order=up"} {
		if rec := f.do(t, req{target: "/api/v1/classes?" + bad}); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "must be") {
			t.Errorf("GET /api/v1/classes?%s = %d %s, want 400 with what is allowed", bad, rec.Code, rec.Body)
		}
	}
}

func TestAdviceAPIAndPages(t *testing.T) {
	f := newFixture(t, nil)
	classWork(f, time.Now())
	v := decodeJSON[apiAdvice](t, f.do(t, req{target: "/api/v1/advice"}))
	if v.Classes != 3 || len(v.Advice) != 1 || !slices.Equal(v.WaitsUnknown, []string{"legacy:report"}) {
		t.Fatalf("GET /api/v1/advice = %+v; want 3 classes judged, 1 advice, legacy:report's waits unknown", v)
	}
	a := v.Advice[0]
	if a.Class != "job:*" || a.Kind != "ttl_short" || a.Severity != "warning" || a.Summary == "" || len(a.Evidence) < 2 ||
		a.Suggestion == "" || a.Figures["near_ttl_share"] != 1 || a.Href != "/classes/job:%2A#advice-ttl_short" {
		t.Errorf("advice = %+v; want job:* ttl_short, a warning with evidence, a suggestion, share 1, its href", a)
	}
	if v := decodeJSON[apiAdvice](t, f.do(t, req{target: "/api/v1/advice?class=invoice:*"})); v.Classes != 1 || len(v.Advice) != 0 {
		t.Errorf("GET /api/v1/advice?class=invoice:* = %+v; want 1 class judged, no advice", v)
	}

	// The class page shows the advice with its evidence, where the href points.
	doc := htmlDoc(t, f.do(t, req{target: "/classes/job:%2A"}))
	items := byTestID(doc, "advice-item")
	if len(items) != 1 || attr(items[0], "id") != "advice-ttl_short" || !strings.Contains(text(items[0]), "ran past 80% of their TTL") ||
		!strings.Contains(text(items[0]), "Suggestion") {
		t.Errorf("class page advice = %d items (%q); want the ttl_short one with its evidence and suggestion", len(items), text(one(t, doc, "advice")))
	}
	if n := len(byTestID(doc, "class-key-row")); n != 20 {
		t.Errorf("class page lists %d keys, want 20", n)
	}
	if rows := byTestID(doc, "class-owner-row"); len(rows) != 1 || !strings.Contains(text(rows[0]), "cron") || !strings.Contains(text(rows[0]), "5s") {
		t.Errorf("class page owners = %d rows; want cron with its TTL of 5s", len(rows))
	}
	if one(t, doc, "class-sections") == nil {
		t.Error("class page has no place for per-class sections")
	}
	// A healthy class says so.
	doc = htmlDoc(t, f.do(t, req{target: "/classes/invoice:%2A?window=1m"}))
	if one(t, doc, "no-advice") == nil || !strings.Contains(text(one(t, doc, "figures")), "Last 1m") {
		t.Errorf("healthy class page: want no advice and the figures of 1m")
	}
	// A watched class says its waits are unknown.
	doc = htmlDoc(t, f.do(t, req{target: "/classes/legacy:report"}))
	if !strings.Contains(text(doc), "waits unknown") {
		t.Errorf("watched class page does not say its waits are unknown")
	}
	if rec := f.do(t, req{target: "/classes/nope:%2A"}); rec.Code != http.StatusNotFound {
		t.Errorf("GET /classes/nope:*  = %d, want 404", rec.Code)
	}

	// The overview counts the advice and links to it.
	doc = htmlDoc(t, f.do(t, req{target: "/"}))
	tile := one(t, doc, "stat-advice")
	if attr(tile, "href") != "/classes?advice=1" || text(one(t, tile, "value")) != "1" {
		t.Errorf("overview advice tile = %q → %q; want 1 → /classes?advice=1", text(tile), attr(tile, "href"))
	}
	// The classes page: a row per class, the advice as a badge linking to it.
	doc = htmlDoc(t, f.do(t, req{target: "/classes"}))
	rows := byTestID(doc, "class-row")
	if len(rows) != 3 || text(one(t, rows[0], "class-link")) != "job:*" {
		t.Fatalf("/classes: %d rows, first %q; want 3, the one with advice (job:*) first", len(rows), text(rows[0]))
	}
	badge := one(t, rows[0], "advice-badge")
	if text(badge) != "ttl_short" || attr(badge, "href") != "/classes/job:%2A#advice-ttl_short" {
		t.Errorf("advice badge = %q → %q", text(badge), attr(badge, "href"))
	}
	if got := text(one(t, rows[1], "wait")); !strings.Contains(got, "p99") {
		t.Errorf("invoice:* wait cell = %q, want its figures", got)
	}
	if got := text(one(t, rows[2], "wait")); got != "unknown" {
		t.Errorf("legacy:report wait cell = %q, want unknown", got)
	}
}

// TestClassBadgesLinkToTheirPage: wherever a class is shown, it links to
// its page, escaped and URL-encoded (class names hold any byte).
func TestClassBadgesLinkToTheirPage(t *testing.T) {
	f := newFixture(t, nil)
	now := time.Now()
	odd := "in\x00v\xff</a>:42"
	f.agg.Apply(contended("invoice:7", 3, 10*time.Millisecond, now.Add(-time.Second)))
	f.agg.Apply(contended(odd, 3, 10*time.Millisecond, now.Add(-time.Second)))
	for _, path := range []string{"/keys", "/", keyPath("invoice:7")} {
		doc := htmlDoc(t, f.do(t, req{target: path}))
		var hrefs []string
		for _, a := range byTestID(doc, "class-link") {
			hrefs = append(hrefs, attr(a, "href"))
		}
		if !slices.Contains(hrefs, "/classes/invoice:%2A") {
			t.Errorf("%s: class links %q; want one to /classes/invoice:%%2A", path, hrefs)
		}
	}
	// Derivation replaces control and invalid bytes (event/class): the
	// class keeps the markup.
	class := "in?v\uFFFD</a>:*"
	if cs := f.agg.Classes(); !slices.Contains(cs, class) {
		t.Fatalf("classes %q; want %q", cs, class)
	}
	doc := htmlDoc(t, f.do(t, req{target: "/keys"}))
	found := false
	for _, a := range byTestID(doc, "class-link") {
		if attr(a, "href") == classPath(class) {
			found = true
			if got := text(a); got != class {
				t.Errorf("odd class shows as %q, want %q", got, class)
			}
		}
	}
	if !found || classPath(class) != "/classes/in%3Fv%EF%BF%BD%3C%2Fa%3E:%2A" {
		t.Errorf("no link to the odd class's page %q", classPath(class))
	}
	rec := f.do(t, req{target: classPath(class)})
	if rec.Code != http.StatusOK || text(one(t, htmlDoc(t, rec), "class-title")) != class {
		t.Errorf("GET %s = %d; want the odd class's page with its escaped name", classPath(class), rec.Code)
	}
}

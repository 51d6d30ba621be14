package dashboard

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

func TestKeysPageFilterSortPaginate(t *testing.T) {
	f := newFixture(t, &Options{PageSize: 10})
	now := time.Now()
	var evs []event.Event
	for i := range 25 {
		key := f.pfx + "batch:" + string(rune('a'+i))
		evs = append(evs, contended(key, i+1, time.Millisecond, now.Add(-30*time.Second))...)
	}
	evs = append(evs, contended(f.pfx+"other-thing", 1, 0, now.Add(-30*time.Second))...)
	f.agg.Apply(evs)

	q := url.Values{"q": {f.pfx + "batch:"}, "sort": {"contentions"}}
	doc := htmlDoc(t, f.do(t, req{target: "/keys?" + q.Encode()}))
	if got := text(one(t, doc, "total")); got != "25" {
		t.Errorf("total = %q, want 25", got)
	}
	rows := byTestID(doc, "key-row")
	if len(rows) != 10 {
		t.Fatalf("rows on page 1 = %d, want 10", len(rows))
	}
	if got := attr(one(t, rows[0], "key-link"), "href"); got != keyPath(f.pfx+"batch:y") {
		t.Errorf("first row = %q, want the most contended key batch:y", got)
	}
	next := attr(one(t, doc, "next"), "href")
	doc = htmlDoc(t, f.do(t, req{target: next}))
	if got := len(byTestID(doc, "key-row")); got != 10 {
		t.Errorf("rows on page 2 = %d, want 10", got)
	}
	doc = htmlDoc(t, f.do(t, req{target: attr(one(t, doc, "next"), "href")}))
	if got := len(byTestID(doc, "key-row")); got != 5 {
		t.Errorf("rows on page 3 = %d, want 5", got)
	}
	if n := len(byTestID(doc, "next")); n != 0 {
		t.Errorf("next links on the last page = %d, want 0", n)
	}

	lp := decodeJSON[apiLockPage](t, f.do(t, req{target: "/api/v1/locks?" + url.Values{"q": {f.pfx}, "sort": {"key"}, "order": {"asc"}, "limit": {"3"}, "offset": {"1"}}.Encode()}))
	if lp.Total != 26 || len(lp.Locks) != 3 || lp.Locks[0].Key != f.pfx+"batch:b" {
		t.Errorf("API locks = total %d, %d locks, first %q; want 26, 3, batch:b", lp.Total, len(lp.Locks), func() string {
			if len(lp.Locks) > 0 {
				return lp.Locks[0].Key
			}
			return ""
		}())
	}
	for _, bad := range []string{"sort=size", "limit=0", "limit=501", "offset=-1", "order=up"} {
		if rec := f.do(t, req{target: "/api/v1/locks?" + bad}); rec.Code != 400 {
			t.Errorf("API locks ?%s = %d, want 400", bad, rec.Code)
		}
	}
	if rec := f.do(t, req{target: "/keys?page=0"}); rec.Code != 400 {
		t.Errorf("keys ?page=0 = %d, want 400", rec.Code)
	}
}

// /keys opens with what needs attention first: stuck holds, then held keys
// with waiters, then other held keys, then the rest by contentions; its
// column headers sort.
func TestKeysOpenWithWhatNeedsAttention(t *testing.T) {
	f := newFixture(t, nil)
	now := time.Now()
	p := f.pfx
	f.agg.Apply(contended(p+"free-hot", 30, 10*time.Millisecond, now.Add(-time.Minute)))
	acq := func(key string, since time.Duration) event.Event {
		return event.Event{Type: event.Acquired, Key: key, Owner: "o", Lease: "l-" + key, TS: now.Add(-since).UnixNano(), TTL: time.Hour, Attempts: 1}
	}
	waiting := event.Event{Type: event.Waiting, Key: p + "held-waited", Owner: "w", Lease: "w1", TS: now.UnixNano(), Wait: time.Minute}
	f.agg.Apply([]event.Event{acq(p+"held", time.Second), acq(p+"stuck", 10*time.Minute), acq(p+"held-waited", 2*time.Second), waiting})
	f.agg.Tick()
	doc := htmlDoc(t, f.do(t, req{target: "/keys?q=" + url.QueryEscape(p)}))
	var got []string
	for _, a := range byTestID(doc, "key-link") {
		got = append(got, strings.TrimPrefix(text(a), p))
	}
	if want := []string{"stuck", "held-waited", "held", "free-hot"}; !slices.Equal(got, want) {
		t.Errorf("/keys order = %v, want %v", got, want)
	}
	for state, want := range map[string][]string{
		"stuck":  {"stuck"},
		"waited": {"held-waited"},
		"held":   {"stuck", "held-waited", "held"},
		"free":   {"free-hot"},
	} {
		d := htmlDoc(t, f.do(t, req{target: "/keys?state=" + state + "&q=" + url.QueryEscape(p)}))
		var keys []string
		for _, a := range byTestID(d, "key-link") {
			keys = append(keys, strings.TrimPrefix(text(a), p))
		}
		if !slices.Equal(keys, want) {
			t.Errorf("/keys?state=%s = %v, want %v", state, keys, want)
		}
		if href := attr(byTag(one(t, d, "sort-contentions"), "a")[0], "href"); !strings.Contains(href, "state="+state) {
			t.Errorf("/keys?state=%s: sort links drop the state filter: %q", state, href)
		}
	}
	if rec := f.do(t, req{target: "/keys?state=bogus"}); rec.Code != 400 {
		t.Errorf("/keys?state=bogus = %d, want 400", rec.Code)
	}
	th := one(t, doc, "sort-attention")
	if attr(th, "aria-sort") != "descending" {
		t.Errorf("the State header is not marked as the active sort")
	}
	if href := attr(byTag(one(t, doc, "sort-contentions"), "a")[0], "href"); !strings.Contains(href, "sort=contentions") || !strings.Contains(href, "q=") {
		t.Errorf("Contentions header links to %q, want the same filters sorted by contentions", href)
	}
}

// /keys and the key page agree on a key's average hold and wait: the hold in
// progress has no length yet, and failed tries waited too.
func TestKeysAndKeyPageAgreeOnAverages(t *testing.T) {
	f := newFixture(t, nil)
	key := f.pfx + "avg:1"
	t0 := time.Now().Add(-2 * time.Minute)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: key, Owner: "a", Lease: "l1", TS: at(0), Wait: 100 * time.Millisecond, Attempts: 2, TTL: time.Minute},
		{Type: event.Released, Key: key, Owner: "a", Lease: "l1", TS: at(10 * time.Second), Hold: 10 * time.Second},
		{Type: event.Failed, Key: key, Owner: "b", TS: at(11 * time.Second), Wait: 300 * time.Millisecond, Attempts: 3, Reason: "held"},
		{Type: event.Acquired, Key: key, Owner: "c", Lease: "l2", TS: at(20 * time.Second), Wait: 200 * time.Millisecond, Attempts: 2, TTL: time.Minute},
		{Type: event.Released, Key: key, Owner: "c", Lease: "l2", TS: at(50 * time.Second), Hold: 30 * time.Second},
		{Type: event.Acquired, Key: key, Owner: "d", Lease: "l3", TS: at(60 * time.Second), Attempts: 1, TTL: time.Hour},
	})
	doc := htmlDoc(t, f.do(t, req{target: "/keys?q=" + url.QueryEscape(key)}))
	hold, wait := text(one(t, doc, "hold-avg")), text(one(t, doc, "wait-avg"))
	if hold != "20s" || wait != "150ms" {
		t.Errorf("/keys avg hold %q, avg wait %q; want 20s and 150ms (as the key page)", hold, wait)
	}
	page := htmlDoc(t, f.do(t, req{target: keyPath(key)}))
	if h := text(one(t, page, "hold-dist")); !strings.Contains(h, "mean 20s") {
		t.Errorf("key page hold card %q, want mean 20s", h)
	}
	if w := text(one(t, page, "wait-dist")); !strings.Contains(w, "mean 150ms") {
		t.Errorf("key page wait card %q, want mean 150ms", w)
	}
}

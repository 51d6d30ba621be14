package dashboard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

func TestOverviewFiguresAndHotKeys(t *testing.T) {
	f := newFixture(t, nil)
	now := time.Now()
	hot, warm := f.pfx+"orders:1", f.pfx+"orders:2"
	f.agg.Apply(contended(hot, 30, 50*time.Millisecond, now.Add(-20*time.Second)))
	f.agg.Apply(contended(warm, 5, 5*time.Millisecond, now.Add(-20*time.Second)))
	f.obtain(t, f.pfx+"held:1", "w", time.Minute, false)

	doc := htmlDoc(t, f.do(t, req{target: "/?window=1m&by=contentions"}))
	rows := byTestID(doc, "hotkey-row")
	if len(rows) < 2 {
		t.Fatalf("hot key rows = %d, want at least 2", len(rows))
	}
	if got := attr(one(t, rows[0], "hotkey-link"), "href"); got != keyPath(hot) {
		t.Errorf("top hot key links to %q, want %q", got, keyPath(hot))
	}
	if got := text(one(t, rows[0], "hotkey-contentions")); got != "30" && got != "≈ 30" {
		t.Errorf("top hot key contentions = %q, want 30", got)
	}
	if got := text(one(t, one(t, doc, "stat-held"), "value")); got != "1" {
		t.Errorf("held tile = %q, want 1", got)
	}
	for _, id := range []string{"acquire-rate", "contention", "wait-p99", "held", "waiters", "stuck", "expirations", "forced"} {
		if href := attr(one(t, doc, "stat-"+id), "href"); href == "" {
			t.Errorf("tile %s links nowhere", id)
		}
	}
	if got := attr(one(t, doc, "by-wait"), "href"); got != "/?window=1m&by=wait#hot" {
		t.Errorf("by-wait link = %q", got)
	}
	if rec := f.do(t, req{target: "/?window=2m"}); rec.Code != 400 {
		t.Errorf("GET /?window=2m = %d, want 400", rec.Code)
	}

	o := decodeJSON[apiOverview](t, f.do(t, req{target: "/api/v1/overview"}))
	if o.Held != 1 || o.EventsTotal < 70 || !o.ReadOnly {
		t.Errorf("API overview held=%d events=%d read_only=%v, want 1, >= 70, true", o.Held, o.EventsTotal, o.ReadOnly)
	}
	hk := decodeJSON[apiHotKeys](t, f.do(t, req{target: "/api/v1/hotkeys?window=1m&by=wait&n=2"}))
	if len(hk.Keys) != 2 || hk.Keys[0].Key != hot || hk.By != "wait" || hk.Window != "1m" {
		t.Errorf("API hot keys by wait = %+v, want %q first of 2", hk, hot)
	}
	if hk.Keys[0].Contentions == nil || *hk.Keys[0].Contentions != 30 {
		t.Errorf("API hot key %q contentions = %v, want 30", hot, hk.Keys[0].Contentions)
	}
	if rec := f.do(t, req{target: "/api/v1/hotkeys?by=size"}); rec.Code != 400 || decodeJSON[apiError](t, rec).Error == "" {
		t.Errorf("API hot keys by=size = %d %s, want 400 with a JSON error", rec.Code, rec.Body.String())
	}
}

// The forced-release log reads as a sentence, and failed acquisitions are
// noted under acquisitions, not under forced releases.
func TestOverviewForcedRowAndTileNotes(t *testing.T) {
	f := newFixture(t, nil)
	key := f.pfx + "export:1"
	now := time.Now()
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: key, Owner: "export-worker/pod-2", Lease: "l1", TS: now.Add(-time.Minute).UnixNano(), TTL: time.Hour, Attempts: 1},
		{Type: event.Forced, Key: key, Owner: "export-worker/pod-2", Lease: "l1", TS: now.UnixNano(), By: "demo", Reason: "hung"},
		{Type: event.Failed, Key: key, Owner: "b", TS: now.UnixNano(), Wait: time.Second, Attempts: 3, Reason: "timeout"},
	})
	doc := htmlDoc(t, f.do(t, req{target: "/"}))
	if got := strings.Join(strings.Fields(text(one(t, doc, "forced-row"))), " "); !strings.Contains(got, "by demo from export-worker/pod-2 ") {
		t.Errorf("forced row reads %q, want \"by demo from export-worker/pod-2 …\"", got)
	}
	if got := text(one(t, doc, "stat-forced")); strings.Contains(got, "failed") {
		t.Errorf("forced tile %q speaks of failed acquisitions", got)
	}
	if got := text(one(t, doc, "stat-acquire-rate")); !strings.Contains(got, "1 failed in 5 min") {
		t.Errorf("acquisitions tile %q, want the failed acquisitions noted", got)
	}
}

// A watched key (passive acquisitions: its callers' waits are unknown)
// ranks after the keys of known contention, by its acquisitions, its
// contention and wait shown as unknown, null in the API.
func TestOverviewHotKeysShowWatchedKeysContentionUnknown(t *testing.T) {
	f := newFixture(t, nil)
	now := time.Now()
	hot, watched := f.pfx+"orders:1", f.pfx+"py:1"
	f.agg.Apply(contended(hot, 3, 5*time.Millisecond, now.Add(-20*time.Second)))
	for i := range 4 {
		f.agg.Apply([]event.Event{{Type: event.Acquired, Key: watched, Owner: "redis-py 0a1b2c3d", Lease: fmt.Sprint("p", i),
			TS: now.Add(time.Duration(i-20) * time.Second).UnixNano(), TTL: 4 * time.Second, Attempts: 1, Passive: true}})
	}
	doc := htmlDoc(t, f.do(t, req{target: "/?window=1m&by=contentions"}))
	rows := byTestID(doc, "hotkey-row")
	if len(rows) != 2 {
		t.Fatalf("hot key rows = %d, want 2", len(rows))
	}
	if got := attr(one(t, rows[1], "hotkey-link"), "href"); got != keyPath(watched) {
		t.Errorf("second hot key links to %q, want the watched %q", got, keyPath(watched))
	}
	if c, a := text(one(t, rows[1], "hotkey-contentions")), text(one(t, rows[1], "hotkey-acquisitions")); c != "unknown" || a != "4" {
		t.Errorf("watched hot key: contentions %q, acquired %q; want unknown, 4", c, a)
	}
	raw := f.do(t, req{target: "/api/v1/hotkeys?window=1m"}).Body.String()
	hk := decodeJSON[apiHotKeys](t, f.do(t, req{target: "/api/v1/hotkeys?window=1m"}))
	if len(hk.Keys) != 2 || hk.Keys[1].Key != watched || hk.Keys[1].Contentions != nil || hk.Keys[1].Wait != nil || hk.Keys[1].Acquisitions != 4 {
		t.Errorf("API hot keys = %s, want %q second with contentions and wait_seconds null, 4 acquisitions", raw, watched)
	}
	if !strings.Contains(raw, `"contentions":null`) {
		t.Errorf("API hot keys = %s, want contentions null for the watched key", raw)
	}
}

// Each class has its stuck threshold: an editing session held for minutes
// under edit:*=2h is not stuck beside the export past the 1m default, and
// the stuck list, the key page and the API say which threshold applies.
func TestStuckThresholdPerClass(t *testing.T) {
	f := newFixtureConfig(t, func(pfx string) state.Config {
		return state.Config{
			StuckAfter: time.Minute,
			Classes:    []state.ClassRule{{Pattern: pfx + "edit:*", Class: "edit:doc:*"}, {Pattern: pfx + "export:*", Class: "export:*"}},
			StuckRules: []state.StuckRule{{Pattern: "edit:*", After: 2 * time.Hour}},
		}
	}, nil)
	edit, export := f.pfx+"edit:1", f.pfx+"export:1"
	at := time.Now().Add(-3 * time.Minute)
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: edit, Owner: "editor/alice", Lease: "l1", TS: at.UnixNano(), TTL: time.Hour, Attempts: 1},
		{Type: event.Acquired, Key: export, Owner: "export-worker/pod-3", Lease: "l2", TS: at.UnixNano(), TTL: time.Hour, Attempts: 1},
		// The event clock (what a hold's age is measured by) is now.
		{Type: event.Renewed, Key: export, Owner: "export-worker/pod-3", Lease: "l2", TS: time.Now().UnixNano(), TTL: time.Hour},
	})
	f.agg.Tick()

	doc := htmlDoc(t, f.do(t, req{target: "/"}))
	rows := byTestID(doc, "stuck-row")
	if len(rows) != 1 || attr(one(t, rows[0], "stuck-link"), "href") != keyPath(export) {
		t.Fatalf("stuck rows = %d, want only %q", len(rows), export)
	}
	if got := text(one(t, rows[0], "stuck-after")); got != "past 1m (default)" {
		t.Errorf("stuck row threshold = %q, want \"past 1m (default)\"", got)
	}
	if got := text(one(t, one(t, doc, "stat-stuck"), "value")); got != "1" {
		t.Errorf("stuck tile = %q, want 1", got)
	}

	kd := htmlDoc(t, f.do(t, req{target: keyPath(edit)}))
	if got := text(one(t, kd, "holder-stuck-after")); got != "2h (edit:*)" {
		t.Errorf("key page of %s: stuck after %q, want \"2h (edit:*)\"", edit, got)
	}
	for key, want := range map[string]apiLockInfo{
		edit:   {Stuck: false, StuckAfter: 7200, StuckRule: "edit:*"},
		export: {Stuck: true, StuckAfter: 60},
	} {
		got := decodeJSON[apiLockDetail](t, f.do(t, req{target: apiLockPath(key)}))
		if got.Stuck != want.Stuck || got.StuckAfter != want.StuckAfter || got.StuckRule != want.StuckRule {
			t.Errorf("GET %s: stuck %v, stuck_after_seconds %v, stuck_rule %q; want %v, %v, %q",
				apiLockPath(key), got.Stuck, got.StuckAfter, got.StuckRule, want.Stuck, want.StuckAfter, want.StuckRule)
		}
	}
}

// The overview tells an expiry under a still-working holder (it found its
// lock lost: two holders may have run at once) from one under a dead
// holder, counts locks held without expiry, prints a wait figure no larger
// than the longest wait, and gives refused tries apart from failures.
func TestOverviewTellsTheStoriesApart(t *testing.T) {
	f := newFixture(t, nil)
	now := time.Now()
	dead, working, passive, hot := f.pfx+"invoice:batch-2", f.pfx+"ledger:account-501", f.pfx+"report:nightly", f.pfx+"orders:1"
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: dead, Owner: "billing-batch/pod-2", Lease: "b1", TS: now.Add(-90 * time.Second).UnixNano(), TTL: 10 * time.Second, Attempts: 1},
		{Type: event.Acquired, Key: working, Owner: "ledger-sync/pod-1", Lease: "s1", TS: now.Add(-80 * time.Second).UnixNano(), TTL: 10 * time.Second, Attempts: 1},
		{Type: event.Lost, Key: working, Owner: "ledger-sync/pod-1", Lease: "s1", TS: now.Add(-60 * time.Second).UnixNano(), Reason: "expired"},
		{Type: event.Acquired, Key: passive, Owner: "redis-py/report-builder", Lease: "p1", TS: now.Add(-20 * time.Second).UnixNano(), Passive: true, Attempts: 1},
		// One wait of exactly a minute: its bucket reaches 2 minutes.
		{Type: event.Acquired, Key: hot, Owner: "a", Lease: "h1", TS: now.Add(-5 * time.Second).UnixNano(), TTL: time.Minute, Wait: time.Minute, Attempts: 40},
		{Type: event.Released, Key: hot, Owner: "a", Lease: "h1", TS: now.Add(-4 * time.Second).UnixNano(), Hold: time.Second},
		{Type: event.Failed, Key: hot, Owner: "b", TS: now.UnixNano(), Wait: 5 * time.Second, Attempts: 9, Reason: "timeout"},
		{Type: event.Failed, Key: hot, Owner: "c", TS: now.UnixNano(), Attempts: 1, Reason: "held"},
	})
	f.agg.Tick()

	doc := htmlDoc(t, f.do(t, req{target: "/"}))
	tile := func(id string) (value, all string) {
		n := one(t, doc, "stat-"+id)
		return text(one(t, n, "value")), strings.Join(strings.Fields(text(n)), " ")
	}
	if v, all := tile("no-expiry"); v != "1" || attr(one(t, doc, "stat-no-expiry"), "href") != "/keys?state=no-expiry" {
		t.Errorf("no-expiry tile = %q (%q), want 1 linking to /keys?state=no-expiry", v, all)
	}
	if v, all := tile("expirations"); v != "2" || !strings.Contains(all, "1 under a working holder: two holders may have run at once") {
		t.Errorf("expirations tile = %q (%q), want 2 with 1 under a working holder", v, all)
	}
	kinds := map[string]string{}
	for _, row := range byTestID(doc, "expiration-row") {
		kinds[attr(one(t, row, "expiration-link"), "title")] = text(one(t, row, "expiration-kind"))
	}
	if kinds[dead] != "holder died" || kinds[working] != "still working" {
		t.Errorf("expiration kinds = %q, want %s: holder died, %s: still working", kinds, dead, working)
	}
	if !strings.Contains(text(one(t, doc, "expirations-why")), "may have run at once") {
		t.Errorf("the expirations card does not say why a working holder's expiry matters")
	}
	// The p99 of a 5 s and a 60 s wait is interpolated within the 30 s–1 m
	// bucket, never its neighbour's bound.
	if v, all := tile("wait-p99"); !strings.Contains(all, "longest 1m00s") || func() bool {
		d, err := time.ParseDuration(v)
		return err != nil || d < 30*time.Second || d > time.Minute
	}() {
		t.Errorf("wait tile = %q (%q), want between 30 and 60 s and the longest wait 1m00s: never the bucket's 2m00s", v, all)
	}
	if _, all := tile("acquire-rate"); !strings.Contains(all, "1 failed, 1 refused in 5 min") {
		t.Errorf("acquisitions tile = %q, want the timeout and the refused try apart", all)
	}

	o := decodeJSON[apiOverview](t, f.do(t, req{target: "/api/v1/overview"}))
	if o.NoExpiry != 1 || o.Expirations5m != 2 || o.ExpiredWorking5m != 1 || o.Failures5m != 2 || o.Refused5m != 1 || o.WaitMax != 60 || o.WaitP99 > 60 || o.WaitP99 < 30 {
		t.Errorf("API overview no_expiry %d, expirations %d, working %d, failures %d, refused %d, wait max %v, p99 %v; want 1, 2, 1, 2, 1, 60, 30..60",
			o.NoExpiry, o.Expirations5m, o.ExpiredWorking5m, o.Failures5m, o.Refused5m, o.WaitMax, o.WaitP99)
	}
	page := decodeJSON[apiLockPage](t, f.do(t, req{target: "/api/v1/locks?state=no-expiry"}))
	if page.Total != 1 || len(page.Locks) != 1 || page.Locks[0].Key != passive || !page.Locks[0].NoExpiry {
		t.Errorf("GET /api/v1/locks?state=no-expiry = %+v, want %s alone", page, passive)
	}
}

// The Stuck tile and the API's stuck count agree with the stuck list at
// every moment, not only after the state's next scan: two holds past the
// threshold, one of them crossing it after the last scan (before, the tile
// said 1 beside a list of 2 for up to a second).
func TestStuckTileCountsTheList(t *testing.T) {
	f := newFixtureConfig(t, func(string) state.Config { return state.Config{StuckAfter: time.Minute} }, nil)
	a, b := f.pfx+"export:1", f.pfx+"export:2"
	now := time.Now()
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: a, Owner: "w1", Lease: "l1", TS: now.Add(-5 * time.Minute).UnixNano(), TTL: time.Hour, Attempts: 1},
		{Type: event.Acquired, Key: b, Owner: "w2", Lease: "l2", TS: now.Add(-61 * time.Second).UnixNano(), TTL: time.Hour, Attempts: 1},
		{Type: event.Renewed, Key: a, Owner: "w1", Lease: "l1", TS: now.Add(-2 * time.Second).UnixNano(), TTL: time.Hour},
	})
	f.agg.Tick() // scans at the event clock, 2 s ago: only a is stuck yet
	// b crosses the threshold by the event clock; no scan since.
	f.agg.Apply([]event.Event{{Type: event.Renewed, Key: a, Owner: "w1", Lease: "l1", TS: now.UnixNano(), TTL: time.Hour}})
	doc := htmlDoc(t, f.do(t, req{target: "/"}))
	rows := len(byTestID(doc, "stuck-row"))
	if got := text(one(t, one(t, doc, "stat-stuck"), "value")); rows != 2 || got != "2" {
		t.Errorf("stuck tile = %q beside %d rows, want 2 and 2", got, rows)
	}
	api := decodeJSON[apiOverview](t, f.do(t, req{target: "/api/v1/overview"}))
	if api.Stuck != 2 {
		t.Errorf("API stuck = %d, want 2", api.Stuck)
	}
}

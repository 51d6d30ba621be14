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

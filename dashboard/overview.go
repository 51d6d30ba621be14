package dashboard

import (
	"net/http"
	"strconv"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/internal/lockjson"
)

// The overview, GET / (overview.templ): headline figures, hot keys, stuck
// locks, recent expirations and forced releases. Its JSON mirror is
// GET /api/v1/overview and GET /api/v1/hotkeys, at the end of this file.

// overviewView is the overview page's view model.
type overviewView struct {
	Page        page
	Tiles       []statTile
	Window      string
	By          string
	WindowTabs  []tab
	ByTabs      []tab
	Hot         []hotRow
	Stuck       []stuckRow
	StuckTotal  int
	Expirations []expirationRow
	Forced      []forcedRow
	Footer      []footerItem
}

// statTile is one headline figure on the overview.
type statTile struct {
	ID    string // data-testid: "stat-" + ID
	Label string
	Value string
	Unit  string
	Note  string
	Href  string // what explains the figure
	Tone  string // "", "warn" or "bad"
	Spark *spark
}

type hotRow struct {
	Rank         int
	Key          keyCell
	Class        string
	Contentions  string
	Wait         string
	Acquisitions string
	Bar          string // meter width 0..100 of the ranked figure
	Approx       string // space-saving bound, "" when exact
	// Unknown marks a watched key, whose contention and wait are unknown
	// (a caller that finds it held writes nothing to Redis), ranked after
	// the others by its acquisitions; AcqApprox bounds those.
	Unknown   bool
	AcqApprox string
}

type stuckRow struct {
	Key     keyCell
	Owner   ownerCell
	HeldFor string
	After   string // the threshold it is past, and which --stuck-after entry set it
	Waiters string
	TTL     string
}

type expirationRow struct {
	Key       keyCell
	Owner     ownerCell
	Ago       string
	AgoAt     string // absolute, for the title
	Held      string
	Confirmed bool
	Working   bool // the holder was still at work after it (state.Expiration.HolderWorking)
	Passive   bool // a watched lock: unless Working, whether its holder worked on is unknown
}

type forcedRow struct {
	Key    keyCell
	Owner  ownerCell
	By     string
	Reason string
	Ago    string
	AgoAt  string // absolute, for the title
}

func (s *server) overviewPage(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	window, ok1 := parseWindow(qs.Get("window"))
	by, ok2 := parseRanking(qs.Get("by"))
	if !ok1 || !ok2 {
		s.fail(w, r, false, http.StatusBadRequest, "window must be one of 1m, 5m, 1h and by one of contentions, wait")
		return
	}
	v := s.overviewView(r, window, by)
	s.render(w, r, http.StatusOK, overviewPage(v))
}

const (
	sideRows        = 8
	expirationsRows = 8
	forcedRows      = 6
)

func (s *server) overviewView(r *http.Request, window time.Duration, by state.Ranking) overviewView {
	now := s.now()
	o := s.q.Overview()
	v := overviewView{Page: s.page(r, "Overview", "overview"), Window: windowLabel(window), By: string(by)}
	// The tile counts the list beside it: the state's own count is its
	// last scan's (once a second), and for that second at the threshold
	// the tile said 1 beside a list of 2.
	stuck := s.q.Stuck()
	o.Stuck = len(stuck)

	contTone := ""
	switch {
	case o.ContentionRatio >= 0.5:
		contTone = "bad"
	case o.ContentionRatio >= 0.2:
		contTone = "warn"
	}
	step := "per " + fmtDuration(o.SeriesStep)
	// Refused tries (a one-shot try that found the lock held, by design)
	// are not failures of the same kind as timeouts and errors.
	failed := "last minute · " + fmtCount(o.Failures5m-o.Refused5m) + " failed"
	if o.Refused5m > 0 {
		failed += ", " + fmtCount(o.Refused5m) + " refused"
	}
	failed += " in 5 min"
	waitNote := "last 5 minutes"
	if o.WaitMax > 0 {
		waitNote += " · longest " + fmtDuration(o.WaitMax)
	}
	expNote := "TTL lapsed while held · 5 min"
	if o.ExpiredWorking5m > 0 {
		expNote = fmtCount(o.ExpiredWorking5m) + " under a working holder: two holders may have run at once · 5 min"
	}
	v.Tiles = []statTile{
		{ID: "acquire-rate", Label: "Acquisitions", Value: fmtRate(o.AcquireRate), Unit: "/s", Note: failed,
			Href: "/keys?sort=contentions", Spark: newSpark(trimSeries(o.AcquireSeries, 12), 120, 36, fmtRate, "acquisitions "+step)},
		{ID: "contention", Label: "Contention", Value: fmtPercent(o.ContentionRatio), Note: "had to wait or were refused",
			Href: "/?window=1m&by=contentions#hot", Tone: contTone, Spark: newSpark(trimSeries(o.ContentionSeries, 12), 120, 36, fmtRate, "contentions "+step)},
		{ID: "wait-p99", Label: "Wait p99", Value: fmtDuration(o.WaitP99), Note: waitNote,
			Href: "/?window=5m&by=wait#hot", Tone: toneIf(o.WaitP99 >= time.Second, "warn")},
		{ID: "held", Label: "Held now", Value: fmtCount(o.Held), Note: fmtCount(o.TrackedKeys) + " keys tracked",
			Href: "/keys?held=1&sort=hold"},
		{ID: "waiters", Label: "Waiting now", Value: fmtCount(o.Waiters), Note: "callers waiting for a lock · who blocks them",
			Href: "/blocking", Tone: toneIf(o.Waiters > 0 && o.Waiters >= o.Held && o.Held > 0, "warn")},
		{ID: "stuck", Label: "Stuck", Value: fmtCount(o.Stuck), Note: "held past the stuck threshold",
			Href: "#stuck", Tone: toneIf(o.Stuck > 0, "bad")},
		{ID: "no-expiry", Label: "No expiry", Value: fmtCount(o.NoExpiry), Note: "held without a TTL: if the holder dies they stay held",
			Href: "/keys?state=no-expiry", Tone: toneIf(o.NoExpiry > 0, "warn")},
		{ID: "expirations", Label: "Expirations", Value: fmtCount(o.Expirations5m), Note: expNote,
			Href: "#expirations", Tone: toneIf(o.ExpiredWorking5m > 0, "bad", toneIf(o.Expirations5m > 0, "warn", ""))},
		{ID: "forced", Label: "Forced releases", Value: fmtCount(o.Forced5m), Note: "by operators · 5 min",
			Href: "#forced", Tone: toneIf(o.Forced5m > 0, "warn")},
		{ID: "overlaps", Label: "Two holders at once", Value: fmtCount(o.Overlaps5m), Note: "overlaps found · 5 min · see incidents",
			Href: "/incidents", Tone: toneIf(o.Overlaps5m > 0, "bad")},
	}
	v.Tiles = append(v.Tiles, s.adviceTile())

	for _, d := range state.Windows {
		l := windowLabel(d)
		v.WindowTabs = append(v.WindowTabs, tab{Label: l, Href: "/?window=" + l + "&by=" + string(by) + "#hot", Active: d == window})
	}
	for _, b := range []state.Ranking{state.ByContentions, state.ByWait} {
		v.ByTabs = append(v.ByTabs, tab{Label: string(b), Href: "/?window=" + v.Window + "&by=" + string(b) + "#hot", Active: b == by})
	}

	hot := s.q.HotKeys(window, by, s.opt.HotKeys)
	var top float64
	for _, h := range hot {
		top = max(top, rankValue(h, by))
	}
	for i, h := range hot {
		row := hotRow{
			Rank: i + 1, Key: newKeyCell(h.Key), Class: h.Class,
			Contentions: fmtCount(h.Contentions), Wait: fmtDuration(h.Wait), Acquisitions: fmtCount(h.Acquisitions),
			Bar: meter(rankValue(h, by), top),
		}
		if h.ContentionUnknown {
			// A watched key: ranked after the others by its acquisitions.
			row.Contentions, row.Wait, row.Unknown = "unknown", "unknown", true
			row.Bar = meter(0, top)
			if h.Error > 0 {
				row.AcqApprox = fmtCount(h.Error)
			}
		} else if h.Error > 0 {
			row.Approx = fmtCount(h.Error)
			if by == state.ByWait {
				row.Approx = fmtDuration(time.Duration(h.Error))
			}
		}
		v.Hot = append(v.Hot, row)
	}

	v.StuckTotal = len(stuck)
	for _, l := range stuck[:min(len(stuck), sideRows)] {
		row := stuckRow{Key: newKeyCell(l.Key), HeldFor: fmtDuration(l.HeldFor(now).Truncate(time.Second)), Waiters: fmtCount(l.Waiters),
			After: stuckThreshold(l)}
		row.Owner = newOwnerCell(l.Owner)
		v.Stuck = append(v.Stuck, row)
	}
	for _, e := range s.q.Expirations(expirationsRows) {
		row := expirationRow{Key: newKeyCell(e.Key), Ago: fmtAgo(now, e.At), AgoAt: fmtAbs(e.At), Held: fmtDuration(e.Held.Truncate(time.Millisecond)),
			Confirmed: e.Confirmed, Working: e.HolderWorking, Passive: e.Passive}
		row.Owner = newOwnerCell(e.Owner)
		v.Expirations = append(v.Expirations, row)
	}
	for _, f := range s.q.ForcedReleases(forcedRows) {
		by, _ := keytext.Visible(f.By)
		reason, _ := keytext.Visible(f.Reason)
		row := forcedRow{Key: newKeyCell(f.Key), By: by, Reason: reason, Ago: fmtAgo(now, f.At), AgoAt: fmtAbs(f.At)}
		row.Owner = newOwnerCell(f.Owner)
		v.Forced = append(v.Forced, row)
	}
	v.Footer = []footerItem{
		{"events", fmtCount(o.EventsTotal)},
		{"last event", fmtAgo(now, o.LastEvent)},
		{"malformed", fmtCount(o.Malformed)},
		{"dropped by emitters", fmtCount(o.Dropped)},
		{"tracked keys", fmtCount(o.TrackedKeys)},
		{"hold p99", fmtDuration(o.HoldP99)},
	}
	return v
}

func rankValue(h state.HotKey, by state.Ranking) float64 {
	if by == state.ByWait {
		return float64(h.Wait)
	}
	return float64(h.Contentions)
}

// toneIf is tone if cond holds, else the first of otherwise (or "").
func toneIf(cond bool, tone string, otherwise ...string) string {
	if cond {
		return tone
	}
	if len(otherwise) > 0 {
		return otherwise[0]
	}
	return ""
}

func windowLabel(d time.Duration) string {
	if d >= time.Hour && d%time.Hour == 0 {
		return strconv.Itoa(int(d/time.Hour)) + "h"
	}
	if d >= time.Minute && d%time.Minute == 0 {
		return strconv.Itoa(int(d/time.Minute)) + "m"
	}
	return d.String()
}

// parseWindow accepts one of state.Windows by its label ("5m") or any
// Go duration equal to one; "" means 5 minutes.
func parseWindow(s string) (time.Duration, bool) {
	if s == "" {
		return 5 * time.Minute, true
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, false
	}
	for _, w := range state.Windows {
		if w == d {
			return d, true
		}
	}
	return 0, false
}

func parseRanking(s string) (state.Ranking, bool) {
	switch state.Ranking(s) {
	case "", state.ByContentions:
		return state.ByContentions, true
	case state.ByWait:
		return state.ByWait, true
	}
	return "", false
}

// apiOverview is GET /api/v1/overview: the overview's figures.
type apiOverview struct {
	At               *time.Time `json:"at,omitempty"`
	AcquireRate      float64    `json:"acquire_rate"`
	ContentionRatio  float64    `json:"contention_ratio"`
	WaitP99          float64    `json:"wait_p99_seconds"`
	HoldP99          float64    `json:"hold_p99_seconds"`
	Held             int        `json:"held"`
	Waiters          int        `json:"waiters"`
	Stuck            int        `json:"stuck"`
	WaitMax          float64    `json:"wait_max_seconds"` // the longest wait of the last 5 minutes
	HoldMax          float64    `json:"hold_max_seconds"` // the longest hold that ended in the last 5 minutes
	NoExpiry         int        `json:"no_expiry"`        // locks held now without a TTL
	Expirations5m    int64      `json:"expirations_5m"`
	ExpiredWorking5m int64      `json:"expired_working_5m"` // of those, under a holder still at work
	Forced5m         int64      `json:"forced_5m"`
	Failures5m       int64      `json:"failures_5m"` // refused tries included
	Refused5m        int64      `json:"refused_5m"`  // of those, one-shot tries that found the lock held
	EventsTotal      int64      `json:"events_total"`
	Malformed        int64      `json:"malformed"`
	Dropped          int64      `json:"dropped"`
	LastEvent        *time.Time `json:"last_event,omitempty"`
	TrackedKeys      int        `json:"tracked_keys"`
	SeriesStep       float64    `json:"series_step_seconds"`
	AcquireSeries    []float64  `json:"acquire_series"`
	ContentionSeries []float64  `json:"contention_series"`
	ReadOnly         bool       `json:"read_only"`
	Ingesting        bool       `json:"ingesting"`
	IngestError      string     `json:"ingest_error,omitempty"`

	// Expirations are the newest expired-while-held locks, newest first
	// (overview_expirations.go).
	Expirations []apiExpiration `json:"expirations"`
	Overlaps5m  int64           `json:"overlaps_5m"` // two holders at once, found in the last 5 minutes
}

func (s *server) apiOverview(w http.ResponseWriter, r *http.Request) {
	o := s.q.Overview()
	v := apiOverview{
		At: lockjson.Time(o.At), AcquireRate: o.AcquireRate, ContentionRatio: o.ContentionRatio,
		WaitP99: seconds(o.WaitP99), HoldP99: seconds(o.HoldP99),
		Held: o.Held, Waiters: o.Waiters, Stuck: len(s.q.Stuck()), // as the overview's list and tile
		WaitMax: seconds(o.WaitMax), HoldMax: seconds(o.HoldMax), NoExpiry: o.NoExpiry,
		Expirations5m: o.Expirations5m, ExpiredWorking5m: o.ExpiredWorking5m,
		Forced5m: o.Forced5m, Failures5m: o.Failures5m, Refused5m: o.Refused5m,
		EventsTotal: o.EventsTotal, Malformed: o.Malformed, Dropped: o.Dropped,
		LastEvent: lockjson.Time(o.LastEvent), TrackedKeys: o.TrackedKeys,
		SeriesStep: seconds(o.SeriesStep), AcquireSeries: nonNil(o.AcquireSeries), ContentionSeries: nonNil(o.ContentionSeries),
		ReadOnly: s.readOnly(), Ingesting: true, Overlaps5m: o.Overlaps5m,
		Expirations: s.apiExpirations(),
	}
	if err := s.q.Health(); err != nil {
		v.Ingesting, v.IngestError = false, err.Error()
	}
	writeJSON(w, r, http.StatusOK, v)
}

type apiHotKey struct {
	Key          string   `json:"key"`
	KeyB64       string   `json:"key_b64,omitempty"`
	Class        string   `json:"class"`
	Contentions  *int64   `json:"contentions"`  // null: unknown (a watched key)
	Wait         *float64 `json:"wait_seconds"` // null: unknown (a watched key)
	Acquisitions int64    `json:"acquisitions"`
	Error        int64    `json:"error"`
	Href         string   `json:"href"`
}

type apiHotKeys struct {
	Window string      `json:"window"`
	By     string      `json:"by"`
	Keys   []apiHotKey `json:"keys"`
}

// apiHotKeys is GET /api/v1/hotkeys?window=5m&by=contentions&n=10.
func (s *server) apiHotKeys(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	window, ok := parseWindow(qs.Get("window"))
	if !ok {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "window must be one of 1m, 5m, 1h"})
		return
	}
	by, ok := parseRanking(qs.Get("by"))
	if !ok {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "by must be contentions or wait"})
		return
	}
	n, ok := atoiDefault(qs.Get("n"), 10, 1, 100)
	if !ok {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "n must be 1..100"})
		return
	}
	v := apiHotKeys{Window: windowLabel(window), By: string(by), Keys: []apiHotKey{}}
	for _, h := range s.q.HotKeys(window, by, n) {
		k := apiHotKey{
			Key: h.Key, KeyB64: keytext.B64IfInvalid(h.Key), Class: h.Class,
			Acquisitions: h.Acquisitions, Error: h.Error, Href: apiLockPath(h.Key),
		}
		if !h.ContentionUnknown {
			c, w := h.Contentions, seconds(h.Wait)
			k.Contentions, k.Wait = &c, &w
		}
		v.Keys = append(v.Keys, k)
	}
	writeJSON(w, r, http.StatusOK, v)
}

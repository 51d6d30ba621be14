package dashboard

import (
	"cmp"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/keytext"
)

// The classes page, GET /classes (classes.templ): one row per lock class,
// lock_stat for a fleet, within one of the Hot keys windows, sorted and
// filtered in the URL. Its JSON mirror is GET /api/v1/classes, at the end
// of this file. One class is GET /classes/{class} (class.go).

// classPath is the page of class. Class names are derived from keys and may
// hold any byte (and '*'): one escaped path segment, as keys.
func classPath(class string) string { return "/classes/" + keytext.PathSegment(class) }

// classFromRequest decodes the {class} route variable.
func classFromRequest(r *http.Request) (string, bool) {
	raw, ok := mux.Vars(r)["class"]
	if !ok || raw == "" {
		return "", false
	}
	c, err := url.PathUnescape(raw)
	if err != nil || c == "" {
		return "", false
	}
	return c, true
}

// classSorts are the orders of the classes page, each descending but
// "class" (by name, ascending).
var classSorts = []string{"advice", "class", "acquisitions", "contentions", "failures", "success", "wait", "hold",
	"held", "waiting", "expirations", "stuck"}

// classQuery is the classes page's (and the API's) choice of window,
// filter and order.
type classQuery struct {
	Window     time.Duration
	Search     string // substring of the class name
	AdviceOnly bool
	Sort       string
	Asc        bool
}

func parseClassQuery(qs url.Values) (classQuery, error) {
	q := classQuery{Search: qs.Get("q"), Sort: qs.Get("sort"), AdviceOnly: qs.Get("advice") == "1" || qs.Get("advice") == "true"}
	w, ok := parseWindow(qs.Get("window"))
	if !ok {
		return q, errors.New("window must be one of 1m, 5m, 1h")
	}
	q.Window = w
	if len(q.Search) > 1024 {
		return q, errors.New("search is longer than 1024 bytes")
	}
	if q.Sort == "" {
		q.Sort = "advice"
	}
	if !slices.Contains(classSorts, q.Sort) {
		return q, errors.New("sort must be one of " + strings.Join(classSorts, ", "))
	}
	switch qs.Get("order") {
	case "asc":
		q.Asc = true
	case "", "desc":
	default:
		return q, errors.New("order must be asc or desc")
	}
	return q, nil
}

// classEntry is a class's figures with its advice.
type classEntry struct {
	state.ClassStats
	Advice []state.Advice
}

// classEntries returns the classes of q's window that q keeps, in q's order.
func (s *server) classEntries(q classQuery) []classEntry {
	var out []classEntry
	for _, c := range s.q.ClassStats(q.Window) {
		if q.Search != "" && !strings.Contains(c.Class, q.Search) {
			continue
		}
		e := classEntry{ClassStats: c, Advice: state.AdviseClass(c)}
		if q.AdviceOnly && len(e.Advice) == 0 {
			continue
		}
		out = append(out, e)
	}
	figure := func(e *classEntry) float64 {
		switch q.Sort {
		case "acquisitions":
			return float64(e.Acquisitions)
		case "contentions":
			return float64(e.Contentions)
		case "failures":
			return float64(e.Attempts() - e.Acquisitions)
		case "success":
			r, ok := e.SuccessRatio()
			if !ok {
				return -1
			}
			return r
		case "wait":
			return float64(e.Wait.P99)
		case "hold":
			return float64(e.Hold.P99)
		case "held":
			return float64(e.Held)
		case "waiting":
			return float64(e.Waiters)
		case "expirations":
			return float64(e.Expirations)
		case "stuck":
			return float64(e.Stuck)
		}
		// advice: warnings weigh more than infos; then contentions.
		var n float64
		for _, a := range e.Advice {
			n += 1e12
			if a.Severity == state.SeverityWarning {
				n += 1e15
			}
		}
		return n + float64(e.Contentions)
	}
	slices.SortStableFunc(out, func(x, y classEntry) int {
		if q.Sort != "class" {
			c := cmp.Compare(figure(&y), figure(&x))
			if q.Asc {
				c = -c
			}
			if c != 0 {
				return c
			}
		}
		return strings.Compare(x.Class, y.Class) // "class" is by name, ascending
	})
	return out
}

// classesView is the classes page's view model.
type classesView struct {
	Page       page
	Window     string
	WindowTabs []tab
	Search     string
	AdviceOnly bool
	Sort       string
	SortHref   map[string]string
	Sorts      []tab
	Rows       []classRow
	Total      string
	Advice     int
	Empty      string
}

// classRow is one class as the table shows it.
type classRow struct {
	Class, ClassT string
	Href          string
	Passive       bool // waits unknown: watched locks only
	Acquisitions  string
	Contentions   string
	Failures      string
	FailuresBy    string // "3 timeout · 2 held"
	Success       string
	Wait, Hold    summaryCell
	TTLs          string
	Held          string
	Waiting       string
	Expirations   string
	Stuck         string
	StuckBad      bool
	HotKey        *keyCell
	Advice        []adviceBadge
}

// summaryCell is a distribution in one cell.
type summaryCell struct {
	Known         bool
	Avg, P50, P99 string
	Max           string
}

func newSummaryCell(s state.Summary, known bool) summaryCell {
	if !known {
		return summaryCell{}
	}
	c := summaryCell{Known: true, Avg: "—", P50: "—", P99: "—", Max: "—"}
	if s.Count > 0 {
		c.Avg, c.P50, c.P99, c.Max = fmtDuration(s.Avg), fmtDuration(s.P50), fmtDuration(s.P99), fmtDuration(s.Max)
	}
	return c
}

// adviceBadge is an advice's kind, linked to its place on the class page.
type adviceBadge struct {
	Kind, Severity, Summary, Href string
}

func (s *server) classesPage(w http.ResponseWriter, r *http.Request) {
	q, err := parseClassQuery(r.URL.Query())
	if err != nil {
		s.fail(w, r, false, http.StatusBadRequest, err.Error())
		return
	}
	s.render(w, r, http.StatusOK, classesPage(s.classesView(r, q)))
}

func (s *server) classesView(r *http.Request, q classQuery) classesView {
	v := classesView{Page: s.page(r, "Classes", "classes"), Window: windowLabel(q.Window), Search: q.Search,
		AdviceOnly: q.AdviceOnly, Sort: q.Sort, SortHref: map[string]string{}}
	link := func(c classQuery) string {
		u := url.Values{}
		u.Set("window", windowLabel(c.Window))
		if c.Search != "" {
			u.Set("q", c.Search)
		}
		if c.AdviceOnly {
			u.Set("advice", "1")
		}
		u.Set("sort", c.Sort)
		return "/classes?" + u.Encode()
	}
	for _, d := range state.Windows {
		c := q
		c.Window = d
		v.WindowTabs = append(v.WindowTabs, tab{Label: windowLabel(d), Href: link(c), Active: d == q.Window})
	}
	for _, so := range classSorts {
		c := q
		c.Sort = so
		v.SortHref[so] = link(c)
		v.Sorts = append(v.Sorts, tab{Label: so, Href: link(c), Active: so == q.Sort})
	}
	entries := s.classEntries(q)
	v.Total = fmtCount(len(entries))
	for _, e := range entries {
		v.Advice += len(e.Advice)
		v.Rows = append(v.Rows, newClassRow(e))
	}
	switch {
	case len(entries) > 0:
	case q.Search != "" || q.AdviceOnly:
		v.Empty = "No class matches these filters."
		if q.AdviceOnly && q.Search == "" {
			v.Empty = "No advice in the last " + v.Window + ": every class with enough samples looks healthy."
		}
	default:
		v.Empty = "No lock classes yet. Classes appear with the first event an instrumented client sends."
	}
	return v
}

func newClassRow(e classEntry) classRow {
	c := e.ClassStats
	row := classRow{
		Class: c.Class, ClassT: classText(c.Class), Href: classPath(c.Class), Passive: !c.WaitsKnown,
		Acquisitions: fmtCount(c.Acquisitions), Contentions: fmtCount(c.Contentions),
		Failures: fmtCount(c.Attempts() - c.Acquisitions), FailuresBy: failuresBy(c.Failures),
		Success: "—", Wait: newSummaryCell(c.Wait, c.WaitsKnown), Hold: newSummaryCell(c.Hold, true),
		TTLs: ttlsText(c), Held: fmtCount(c.Held), Waiting: fmtCount(c.Waiters),
		Expirations: fmtCount(c.Expirations), Stuck: fmtCount(c.Stuck), StuckBad: c.Stuck > 0,
	}
	if !c.WaitsKnown {
		row.Contentions = "unknown"
	}
	if r, ok := c.SuccessRatio(); ok {
		row.Success = fmtPercent(r)
	}
	if c.HotKey != "" {
		k := newKeyCell(c.HotKey)
		row.HotKey = &k
	}
	for _, a := range e.Advice {
		row.Advice = append(row.Advice, adviceBadge{Kind: string(a.Kind), Severity: a.Severity, Summary: a.Summary,
			Href: classPath(c.Class) + "#advice-" + string(a.Kind)})
	}
	return row
}

// failuresBy lists the non-zero failure counts by reason.
func failuresBy(f [len(state.FailureReasons)]int64) string {
	var parts []string
	for i, n := range f {
		if n > 0 {
			parts = append(parts, fmtCount(n)+" "+state.FailureReasons[i])
		}
	}
	return strings.Join(parts, " · ")
}

// ttlsText lists the TTLs holders set: "5s ×40 · 5m ×3".
func ttlsText(c state.ClassStats) string {
	var parts []string
	for _, t := range c.TTLs {
		parts = append(parts, fmtDuration(t.TTL)+" ×"+fmtCount(t.Count))
	}
	if c.TTLOther > 0 {
		parts = append(parts, "others ×"+fmtCount(c.TTLOther))
	}
	if c.NoTTL > 0 {
		parts = append(parts, "none ×"+fmtCount(c.NoTTL))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, " · ")
}

// apiSummary is a distribution in the JSON API.
type apiSummary struct {
	Count int64   `json:"count"`
	Avg   float64 `json:"avg_seconds"`
	P50   float64 `json:"p50_seconds"`
	P99   float64 `json:"p99_seconds"`
	Max   float64 `json:"max_seconds"`
}

func newAPISummary(s state.Summary) apiSummary {
	return apiSummary{Count: s.Count, Avg: seconds(s.Avg), P50: seconds(s.P50), P99: seconds(s.P99), Max: seconds(s.Max)}
}

// apiTTL is a TTL holders set and how many acquisitions set it.
type apiTTL struct {
	Seconds      float64 `json:"seconds"`
	Acquisitions int64   `json:"acquisitions"`
}

// apiClass is one class as GET /api/v1/classes lists it.
type apiClass struct {
	Class        string           `json:"class"`
	ClassB64     string           `json:"class_b64,omitempty"`
	Acquisitions int64            `json:"acquisitions"`
	Passive      int64            `json:"passive_acquisitions"` // seen by the passive watch: wait unknown
	WaitsKnown   bool             `json:"waits_known"`
	Contentions  int64            `json:"contentions"`
	Failures     map[string]int64 `json:"failures"` // by reason: timeout, canceled, error, held
	SuccessRatio *float64         `json:"success_ratio"`
	Wait         *apiSummary      `json:"wait"` // null when waits are unknown (watched locks only)
	Hold         apiSummary       `json:"hold"`
	TTLSeconds   []float64        `json:"ttl_seconds"` // the TTLs holders set, most set first
	TTLs         []apiTTL         `json:"ttls"`        // the same with their counts
	TTLOther     int64            `json:"ttl_other_acquisitions"`
	NoTTL        int64            `json:"no_ttl_acquisitions"`
	Held         int              `json:"held"`
	Waiters      int              `json:"waiters"`
	Expirations  int64            `json:"expirations"`
	Stuck        int              `json:"stuck"`
	NoExpiry     int              `json:"no_expiry"`
	HotKey       string           `json:"hot_key"`
	HotKeyB64    string           `json:"hot_key_b64,omitempty"`
	Advice       int              `json:"advice"` // how many; GET /api/v1/advice lists them
	Href         string           `json:"href"`
}

func newAPIClass(e classEntry) apiClass {
	c := e.ClassStats
	j := apiClass{
		Class: c.Class, ClassB64: keytext.B64IfInvalid(c.Class), Acquisitions: c.Acquisitions, Passive: c.Passive,
		WaitsKnown: c.WaitsKnown, Contentions: c.Contentions, Failures: map[string]int64{},
		Hold: newAPISummary(c.Hold), TTLSeconds: []float64{}, TTLs: []apiTTL{}, TTLOther: c.TTLOther, NoTTL: c.NoTTL,
		Held: c.Held, Waiters: c.Waiters, Expirations: c.Expirations, Stuck: c.Stuck, NoExpiry: c.NoExpiry,
		HotKey: c.HotKey, HotKeyB64: keytext.B64IfInvalid(c.HotKey), Advice: len(e.Advice), Href: classPath(c.Class),
	}
	for i, r := range state.FailureReasons {
		j.Failures[r] = c.Failures[i]
	}
	if r, ok := c.SuccessRatio(); ok {
		j.SuccessRatio = &r
	}
	if c.WaitsKnown {
		w := newAPISummary(c.Wait)
		j.Wait = &w
	}
	for _, t := range c.TTLs {
		j.TTLSeconds = append(j.TTLSeconds, seconds(t.TTL))
		j.TTLs = append(j.TTLs, apiTTL{Seconds: seconds(t.TTL), Acquisitions: t.Count})
	}
	return j
}

type apiClasses struct {
	Window        string     `json:"window"`
	WindowSeconds float64    `json:"window_seconds"`
	Classes       []apiClass `json:"classes"`
}

// apiClassesList is GET /api/v1/classes?window=5m&q=&advice=1&sort=advice&order=desc.
func (s *server) apiClassesList(w http.ResponseWriter, r *http.Request) {
	q, err := parseClassQuery(r.URL.Query())
	if err != nil {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	v := apiClasses{Window: windowLabel(q.Window), WindowSeconds: seconds(q.Window), Classes: []apiClass{}}
	for _, e := range s.classEntries(q) {
		v.Classes = append(v.Classes, newAPIClass(e))
	}
	writeJSON(w, r, http.StatusOK, v)
}

// classSortDir is the direction a sort orders the classes in (aria-sort).
func classSortDir(sort string) string {
	if sort == "class" {
		return "ascending"
	}
	return "descending"
}

func classSortArrow(sort string) string {
	if sort == "class" {
		return "↑"
	}
	return "↓"
}

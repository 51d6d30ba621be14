package dashboard

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/lockscope/lockscope/collector/state"
)

// One lock class, GET /classes/{class} (class.templ): its figures within a
// window, over the last five minutes, its keys, their owners and its
// advice. Other features add their per-class sections in
// class_sections.templ.

// classView is the class page's view model.
type classView struct {
	Page       page
	Class      string // the raw name, for the sections that look things up
	ClassT     string
	Href       string
	Window     string
	WindowTabs []tab
	Passive    bool // waits unknown
	Stats      []footerItem
	Series     []classSeries
	SeriesStep string
	Advice     []adviceView
	Keys       []lockRow
	KeysTotal  string
	KeysHref   string
	Owners     []classOwner
	OwnersNote string
	StuckAfter string
	LockOrder  lockOrderView // the class's edges and inversions (lockorder.go)
}

// classSeries is one figure of the class over time.
type classSeries struct {
	Label string
	Spark *spark
}

// classOwner is one owner of the class's keys: how many it holds now, how
// many it held last, and the TTLs it set.
type classOwner struct {
	Owner      ownerCell
	Held, Keys string
	TTLs       string
}

// adviceView is one advice as a page shows it.
type adviceView struct {
	ID         string // the anchor: "advice-" + kind
	Kind       string
	Severity   string
	Summary    string
	Evidence   []string
	Suggestion string
}

func newAdviceView(a state.Advice) adviceView {
	return adviceView{ID: "advice-" + string(a.Kind), Kind: string(a.Kind), Severity: a.Severity, Summary: a.Summary,
		Evidence: a.Evidence, Suggestion: a.Suggestion}
}

// classKeys is how many of the class's keys the page lists, and ownersScan
// how many it reads for their owners.
const (
	classKeys  = 20
	ownersScan = 500
)

func (s *server) classPage(w http.ResponseWriter, r *http.Request) {
	class, ok := classFromRequest(r)
	if !ok {
		s.fail(w, r, false, http.StatusBadRequest, "bad class in path")
		return
	}
	window, ok := parseWindow(r.URL.Query().Get("window"))
	if !ok {
		s.fail(w, r, false, http.StatusBadRequest, "window must be one of 1m, 5m, 1h")
		return
	}
	d, ok := s.q.ClassDetail(window, class)
	if !ok {
		s.fail(w, r, false, http.StatusNotFound, "no lock class "+classText(class)+" is known")
		return
	}
	s.render(w, r, http.StatusOK, classPage(s.classView(r, d)))
}

func (s *server) classView(r *http.Request, d state.ClassDetail) classView {
	now := s.now()
	c := d.ClassStats
	v := classView{Page: s.page(r, "Class "+classText(c.Class), "classes"), Class: c.Class, ClassT: classText(c.Class),
		Href: classPath(c.Class), Window: windowLabel(c.Window), Passive: !c.WaitsKnown,
		LockOrder:  newLockOrderView(s.q.LockOrder(c.Class), c.Class, now),
		SeriesStep: fmtDuration(d.SeriesStep), StuckAfter: fmtThreshold(d.StuckAfter)}
	for _, w := range state.Windows {
		v.WindowTabs = append(v.WindowTabs, tab{Label: windowLabel(w), Href: v.Href + "?window=" + windowLabel(w), Active: w == c.Window})
	}
	row := newClassRow(classEntry{ClassStats: c})
	wait := "unknown (watched locks)"
	if row.Wait.Known {
		wait = row.Wait.Avg + " · " + row.Wait.P50 + " · " + row.Wait.P99 + " · " + row.Wait.Max
	}
	failed := row.Failures
	if row.FailuresBy != "" {
		failed += " (" + row.FailuresBy + ")"
	}
	v.Stats = []footerItem{
		{"Acquired", row.Acquisitions},
		{"Contended", row.Contentions},
		{"Failed", failed},
		{"Success", row.Success},
		{"Wait avg · p50 · p99 · max", wait},
		{"Hold avg · p50 · p99 · max", row.Hold.Avg + " · " + row.Hold.P50 + " · " + row.Hold.P99 + " · " + row.Hold.Max},
		{"TTLs set", row.TTLs},
		{"Held now", row.Held},
		{"Waiting now", row.Waiting},
		{"Expired while held", row.Expirations},
		{"Stuck now", row.Stuck + " (past " + v.StuckAfter + ")"},
	}
	if b := c.Busiest; b.Key != "" && c.Span > 0 {
		v.Stats = append(v.Stats, footerItem{"Busiest key", newKeyCell(b.Key).Text + ": held " + fmtPercent(min(float64(b.Hold)/float64(c.Span), 1)) + " of the time"})
	}
	series := []struct {
		label string
		f     func(state.ClassStep) float64
		fmt   func(float64) string
	}{
		{"Acquisitions per second", func(p state.ClassStep) float64 { return float64(p.Acquisitions) / d.SeriesStep.Seconds() }, fmtRate},
		{"Contentions per second", func(p state.ClassStep) float64 { return float64(p.Contentions) / d.SeriesStep.Seconds() }, fmtRate},
		{"Failures per second", func(p state.ClassStep) float64 { return float64(p.Failures) / d.SeriesStep.Seconds() }, fmtRate},
		{"Wait p99", func(p state.ClassStep) float64 { return p.WaitP99.Seconds() }, fmtSeconds},
		{"Hold p99", func(p state.ClassStep) float64 { return p.HoldP99.Seconds() }, fmtSeconds},
		{"Expirations per second", func(p state.ClassStep) float64 { return float64(p.Expirations) / d.SeriesStep.Seconds() }, fmtRate},
	}
	for _, x := range series {
		if x.label == "Wait p99" && v.Passive {
			continue
		}
		vals := make([]float64, len(d.Series))
		for i, p := range d.Series {
			vals[i] = x.f(p)
		}
		v.Series = append(v.Series, classSeries{Label: x.label, Spark: newSpark(trimSeries(vals, 12), 240, 40, x.fmt, x.label+" per "+v.SeriesStep)})
	}
	for _, a := range state.AdviseClass(c) {
		v.Advice = append(v.Advice, newAdviceView(a))
	}

	q := url.Values{}
	q.Set("class", c.Class)
	v.KeysHref = "/keys?" + q.Encode()
	page := s.q.Locks(state.LockQuery{Class: c.Class, Sort: state.SortContentions, Limit: ownersScan})
	v.KeysTotal = fmtCount(page.Total)
	for _, l := range page.Locks[:min(len(page.Locks), classKeys)] {
		kr := lockRow{Key: newKeyCell(l.Key), Held: l.Held, Stuck: l.Stuck, Passive: l.Passive, NoExpiry: l.NoExpiry(),
			Waiters: fmtCount(l.Waiters), Acquisitions: fmtCount(l.Acquisitions), Contentions: fmtCount(l.Contentions),
			WaitAvg: avg(l.WaitTotal, l.Acquisitions+l.Failures), HoldAvg: avg(l.HoldTotal, l.Acquisitions-heldNow(l)), HeldFor: "—"}
		kr.Owner = linkedOwnerCell(l.Owner)
		if l.Passive && l.WaitTotal == 0 && l.Contentions == 0 {
			kr.WaitAvg, kr.Contentions = "unknown", "unknown"
		}
		if l.Held && !l.Since.IsZero() {
			kr.HeldFor = fmtDuration(l.HeldFor(now).Truncate(time.Millisecond))
		}
		v.Keys = append(v.Keys, kr)
	}
	v.Owners = classOwners(page.Locks)
	if page.Total > len(page.Locks) {
		v.OwnersNote = "Of the class's " + fmtCount(len(page.Locks)) + " most contended keys (of " + fmtCount(page.Total) + ")."
	}
	return v
}

// classOwners groups keys by their current (or last) owner, the owners
// holding the most first.
func classOwners(ls []state.LockInfo) []classOwner {
	type acc struct {
		held, keys int
		ttls       []time.Duration
	}
	by := map[string]*acc{}
	var names []string
	for _, l := range ls {
		if l.Owner == "" {
			continue
		}
		a := by[l.Owner]
		if a == nil {
			a = &acc{}
			by[l.Owner] = a
			names = append(names, l.Owner)
		}
		a.keys++
		if l.Held {
			a.held++
		}
		if ttl := l.TTL; ttl > 0 && !slices.Contains(a.ttls, ttl) && len(a.ttls) < 4 {
			a.ttls = append(a.ttls, ttl)
		}
	}
	slices.SortFunc(names, func(x, y string) int {
		if c := cmp.Compare(by[y].held, by[x].held); c != 0 {
			return c
		}
		if c := cmp.Compare(by[y].keys, by[x].keys); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	var out []classOwner
	for _, n := range names[:min(len(names), classKeys)] {
		a := by[n]
		o := classOwner{Held: fmtCount(a.held), Keys: fmtCount(a.keys), TTLs: "—"}
		o.Owner = linkedOwnerCell(n)
		if len(a.ttls) > 0 {
			slices.Sort(a.ttls)
			var parts []string
			for _, t := range a.ttls {
				parts = append(parts, fmtDuration(t))
			}
			o.TTLs = strings.Join(parts, ", ")
		}
		out = append(out, o)
	}
	return out
}

// fmtSeconds formats seconds as a duration.
func fmtSeconds(x float64) string { return fmtDuration(time.Duration(x * float64(time.Second))) }

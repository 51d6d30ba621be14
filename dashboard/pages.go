package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
)

// render writes a component with status; a render error after the header
// is out can only be logged.
func (s *server) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	if err := c.Render(r.Context(), w); err != nil {
		s.log.Error("dashboard: render", "path", r.URL.Path, "err", err)
	}
}

// fail answers an error as a page or as JSON.
func (s *server) fail(w http.ResponseWriter, r *http.Request, api bool, status int, msg string) {
	if api {
		writeJSON(w, r, status, apiError{Error: msg})
		return
	}
	p := s.page(r, statusText(status), "")
	p.Live = false
	s.render(w, r, status, errorPage(errorView{Page: p, Status: status, Message: msg}))
}

func statusText(code int) string { return http.StatusText(code) }

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

	contTone := ""
	switch {
	case o.ContentionRatio >= 0.5:
		contTone = "bad"
	case o.ContentionRatio >= 0.2:
		contTone = "warn"
	}
	step := "per " + fmtDuration(o.SeriesStep)
	v.Tiles = []statTile{
		{ID: "acquire-rate", Label: "Acquisitions", Value: fmtRate(o.AcquireRate), Unit: "/s", Note: "last minute · " + fmtCount(o.Failures5m) + " failed in 5 min",
			Href: "/keys?sort=contentions", Spark: newSpark(trimSeries(o.AcquireSeries, 12), 120, 36, fmtRate, "acquisitions "+step)},
		{ID: "contention", Label: "Contention", Value: fmtPercent(o.ContentionRatio), Note: "had to wait or were refused",
			Href: "/?window=1m&by=contentions#hot", Tone: contTone, Spark: newSpark(trimSeries(o.ContentionSeries, 12), 120, 36, fmtRate, "contentions "+step)},
		{ID: "wait-p99", Label: "Wait p99", Value: fmtDuration(o.WaitP99), Note: "last 5 minutes · hold p99 " + fmtDuration(o.HoldP99),
			Href: "/?window=5m&by=wait#hot", Tone: toneIf(o.WaitP99 >= time.Second, "warn")},
		{ID: "held", Label: "Held now", Value: fmtCount(o.Held), Note: fmtCount(o.TrackedKeys) + " keys tracked",
			Href: "/keys?held=1&sort=hold"},
		{ID: "waiters", Label: "Waiting now", Value: fmtCount(o.Waiters), Note: "callers waiting for a lock · who blocks them",
			Href: "/blocking", Tone: toneIf(o.Waiters > 0 && o.Waiters >= o.Held && o.Held > 0, "warn")},
		{ID: "stuck", Label: "Stuck", Value: fmtCount(o.Stuck), Note: "held past the stuck threshold",
			Href: "#stuck", Tone: toneIf(o.Stuck > 0, "bad")},
		{ID: "expirations", Label: "Expirations", Value: fmtCount(o.Expirations5m), Note: "TTL lapsed while held · 5 min",
			Href: "#expirations", Tone: toneIf(o.Expirations5m > 0, "warn")},
		{ID: "forced", Label: "Forced releases", Value: fmtCount(o.Forced5m), Note: "by operators · 5 min",
			Href: "#forced", Tone: toneIf(o.Forced5m > 0, "warn")},
	}

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
			Rank: i + 1, Key: newKeyCell(h.Key), Class: classText(h.Class),
			Contentions: fmtCount(h.Contentions), Wait: fmtDuration(h.Wait), Acquisitions: fmtCount(h.Acquisitions),
			Bar: meter(rankValue(h, by), top),
		}
		if h.Error > 0 {
			row.Approx = fmtCount(h.Error)
			if by == state.ByWait {
				row.Approx = fmtDuration(time.Duration(h.Error))
			}
		}
		v.Hot = append(v.Hot, row)
	}

	stuck := s.q.Stuck()
	v.StuckTotal = len(stuck)
	for _, l := range stuck[:min(len(stuck), sideRows)] {
		row := stuckRow{Key: newKeyCell(l.Key), HeldFor: fmtDuration(l.HeldFor(now).Truncate(time.Second)), Waiters: fmtCount(l.Waiters)}
		row.Owner, row.OwnerT = ownerText(l.Owner)
		v.Stuck = append(v.Stuck, row)
	}
	for _, e := range s.q.Expirations(expirationsRows) {
		row := expirationRow{Key: newKeyCell(e.Key), Ago: fmtAgo(now, e.At), AgoAt: fmtAbs(e.At), Held: fmtDuration(e.Held.Truncate(time.Millisecond)), Confirmed: e.Confirmed}
		row.Owner, row.OwnerT = ownerText(e.Owner)
		v.Expirations = append(v.Expirations, row)
	}
	for _, f := range s.q.ForcedReleases(forcedRows) {
		by, _ := displayKey(f.By)
		reason, _ := displayKey(f.Reason)
		row := forcedRow{Key: newKeyCell(f.Key), By: by, Reason: reason, Ago: fmtAgo(now, f.At), AgoAt: fmtAbs(f.At)}
		row.Owner, row.OwnerT = ownerText(f.Owner)
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

func toneIf(cond bool, tone string) string {
	if cond {
		return tone
	}
	return ""
}

// lockQuery reads the keys page's (and the locks API's) filters; def is the
// order when none is asked for.
func lockQuery(qs url.Values, def state.LockSort) (state.LockQuery, error) {
	lq := state.LockQuery{
		Search:   qs.Get("q"),
		Class:    qs.Get("class"),
		HeldOnly: qs.Get("held") == "1" || qs.Get("held") == "true",
		Sort:     state.LockSort(qs.Get("sort")),
		State:    state.LockState(qs.Get("state")),
	}
	switch lq.State {
	case "", state.StateHeld, state.StateStuck, state.StateWaited, state.StateFree:
	default:
		return lq, errors.New("state must be one of held, stuck, waited, free")
	}
	if len(lq.Search) > 1024 {
		return lq, errors.New("search is longer than 1024 bytes")
	}
	switch lq.Sort {
	case "":
		lq.Sort = def
	case state.SortKey, state.SortContentions, state.SortWait, state.SortHold, state.SortAttention:
	default:
		return lq, errors.New("sort must be one of attention, key, contentions, wait, hold")
	}
	switch qs.Get("order") {
	case "asc":
		lq.Asc = true
	case "", "desc":
	default:
		return lq, errors.New("order must be asc or desc")
	}
	return lq, nil
}

func atoiDefault(s string, def, lo, hi int) (int, bool) {
	if s == "" {
		return def, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, false
	}
	return n, true
}

func (s *server) keysPage(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	lq, err := lockQuery(qs, state.SortAttention)
	pageN, ok := atoiDefault(qs.Get("page"), 1, 1, 1<<30)
	if err != nil || !ok {
		msg := "page must be a positive number"
		if err != nil {
			msg = err.Error()
		}
		s.fail(w, r, false, http.StatusBadRequest, msg)
		return
	}
	s.render(w, r, http.StatusOK, keysPage(s.keysView(r, lq, pageN)))
}

func (s *server) keysView(r *http.Request, lq state.LockQuery, pageN int) keysView {
	now := s.now()
	size := s.opt.PageSize
	lq.Limit = size
	lq.Offset = (pageN - 1) * size
	res := s.q.Locks(lq)
	pages := max(1, (res.Total+size-1)/size)
	if pageN > pages && res.Total > 0 {
		// Past the end (the set shrank since the link was made): show the last page.
		pageN = pages
		lq.Offset = (pageN - 1) * size
		res = s.q.Locks(lq)
	}
	v := keysView{
		Page:     s.page(r, "Keys", "keys"),
		Search:   lq.Search,
		Class:    lq.Class,
		HeldOnly: lq.HeldOnly,
		State:    string(lq.State),
		Sort:     string(lq.Sort),
		Asc:      lq.Asc,
		Classes:  s.q.Classes(),
		Total:    fmtCount(res.Total),
		PageN:    pageN,
		Pages:    pages,
	}
	for _, so := range []state.LockSort{state.SortAttention, state.SortContentions, state.SortWait, state.SortHold, state.SortKey} {
		v.Sorts = append(v.Sorts, tab{Label: string(so), Active: so == lq.Sort})
	}
	from := min(lq.Offset+1, res.Total)
	v.From, v.To = fmtCount(from), fmtCount(lq.Offset+len(res.Locks))
	link := func(n int, sort state.LockSort) string {
		q := url.Values{}
		if lq.Search != "" {
			q.Set("q", lq.Search)
		}
		if lq.Class != "" {
			q.Set("class", lq.Class)
		}
		if lq.HeldOnly {
			q.Set("held", "1")
		}
		if lq.State != "" {
			q.Set("state", string(lq.State))
		}
		q.Set("sort", string(sort))
		if n > 1 {
			q.Set("page", strconv.Itoa(n))
		}
		return "/keys?" + q.Encode()
	}
	if pageN > 1 {
		v.PrevHref = link(pageN-1, lq.Sort)
	}
	if pageN < pages {
		v.NextHref = link(pageN+1, lq.Sort)
	}
	v.SortHref = map[string]string{}
	for i := range v.Sorts {
		v.Sorts[i].Href = link(1, state.LockSort(v.Sorts[i].Label))
		v.SortHref[v.Sorts[i].Label] = v.Sorts[i].Href
	}
	switch {
	case res.Total > 0:
	case lq.Search != "" || lq.Class != "" || lq.HeldOnly || lq.State != "":
		v.Empty = "No tracked key matches these filters."
	default:
		v.Empty = "No keys tracked yet. Keys appear with the first event an instrumented client sends."
	}
	for _, l := range res.Locks {
		row := lockRow{
			Key: newKeyCell(l.Key), Class: classText(l.Class), Held: l.Held, Stuck: l.Stuck, Passive: l.Passive, NoExpiry: l.NoExpiry(),
			Waiters: fmtCount(l.Waiters), Acquisitions: fmtCount(l.Acquisitions), Contentions: fmtCount(l.Contentions),
			// As the key page's cards: waits of acquisitions and failures,
			// holds that ended (the one in progress has no length yet).
			WaitAvg: avg(l.WaitTotal, l.Acquisitions+l.Failures), HoldAvg: avg(l.HoldTotal, l.Acquisitions-heldNow(l)),
			LastEvent: fmtAgo(now, l.LastEvent), LastEventAt: fmtAbs(l.LastEvent), HeldFor: "—",
		}
		if l.Passive && l.WaitTotal == 0 && l.Contentions == 0 {
			// Passive watch cannot see a caller wait: unknown, not zero.
			row.WaitAvg, row.Contentions = "unknown", "unknown"
		}
		if l.Held {
			row.Owner, row.OwnerT = ownerText(l.Owner)
			if !l.Since.IsZero() {
				row.HeldFor = fmtDuration(l.HeldFor(now).Truncate(time.Millisecond))
			}
		}
		v.Rows = append(v.Rows, row)
	}
	return v
}

// heldNow is 1 for a key held now: its hold is counted in acquisitions but
// not yet in the hold total.
func heldNow(l state.LockInfo) int64 {
	if l.Held {
		return 1
	}
	return 0
}

func avg(total time.Duration, n int64) string {
	if n <= 0 || total <= 0 {
		return "—"
	}
	return fmtDuration(total / time.Duration(n))
}

// inspectTimeout bounds the one Redis round trip a key page makes.
const inspectTimeout = 2 * time.Second

// inspect asks Redis for key's holder: nil and no error when it is not held
// (or there is no lock client to ask).
func (s *server) inspect(ctx context.Context, key string) (*lock.Holder, error) {
	if s.rel == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	h, err := s.rel.Inspect(ctx, key)
	if errors.Is(err, lock.ErrNotHeld) {
		return nil, nil
	}
	return h, err
}

// redisNote says what Redis answered, for the holder card.
func (s *server) redisNote(h *lock.Holder, err error) string {
	switch {
	case err != nil:
		return "Redis could not be asked: " + err.Error()
	case h == nil && s.rel != nil:
		return "Redis holds no such lock now."
	}
	return ""
}

func (s *server) keyPage(w http.ResponseWriter, r *http.Request) {
	key, ok := keyFromRequest(r)
	if !ok {
		s.fail(w, r, false, http.StatusBadRequest, "bad key in path")
		return
	}
	d, known := s.q.Lock(key)
	redisHolder, err := s.inspect(r.Context(), key)
	note := s.redisNote(redisHolder, err)
	if !known && err != nil {
		s.fail(w, r, false, http.StatusBadGateway, "lockscope has seen no event for this key and "+note)
		return
	}
	if !known && redisHolder == nil {
		s.fail(w, r, false, http.StatusNotFound, "lockscope has seen no event for this key and Redis holds no such lock")
		return
	}
	s.render(w, r, http.StatusOK, keyPage(s.keyView(r, key, d, known, redisHolder, note)))
}

const eventRows = 25

func (s *server) keyView(r *http.Request, key string, d state.KeyDetail, known bool, rh *lock.Holder, note string) keyView {
	now := s.now()
	v := keyView{
		Page:        s.page(r, "Key", "keys"),
		Key:         newKeyCell(key),
		Bytes:       fmtCount(len(key)) + " bytes",
		Class:       classText(d.Class),
		Known:       known,
		RedisNote:   note,
		ReleaseHref: releasePath(key),
	}
	if v.Class == "" {
		v.Class = "unclassified"
	}
	v.Page.Title = shortKey(v.Key.Full, 60)
	v.Holder = s.holderFromInfo(d.LockInfo, now)
	if rh != nil {
		v.Redis = holderFromLock(rh, now)
		v.Redis.Waiters = fmtCount(d.Waiters)
		v.Redis.Stuck = d.Stuck
		v.Redis.Passive = d.Passive
		v.Redis.Fingerprint = "" // shown on the confirmation, where it matters
		sinceFromCollector(v.Redis, rh, d.LockInfo, now)
	}
	switch {
	case d.Stuck:
		v.State = "stuck"
	case d.Held || rh != nil:
		v.State = "held"
	default:
		v.State = "free"
	}
	v.CanRelease = !s.readOnly() && rh != nil
	v.Stats = []footerItem{
		{"Acquired", fmtCount(d.Acquisitions)},
		{"Contentions", fmtCount(d.Contentions)},
		{"Failed", fmtCount(d.Failures)},
		{"Avg wait", avg(d.Wait.Sum, d.Wait.Count)},
		{"Avg hold", avg(d.Hold.Sum, d.Hold.Count)},
		{"Last event", fmtAgo(now, d.LastEvent)},
	}
	v.Rate = newSpark(trimSeries(d.AcquireSeries, 12), 600, 56, fmtRate, "acquisitions per second")
	v.RateStep = fmtDuration(d.SeriesStep)
	v.Wait = newDist("Wait", "wait", d.Wait)
	if d.Passive && d.Wait.Count == 0 {
		v.Wait.EmptyMsg = "Unknown: this lock is watched passively, and a caller's failed SET NX makes no notification, so waits and contention cannot be seen."
	}
	v.Hold = newDist("Hold", "hold", d.Hold)
	if d.Hold.Count == 0 && d.Held && !d.Since.IsZero() {
		v.Hold.EmptyMsg = "No hold has ended yet: the current one has lasted " + fmtDuration(d.HeldFor(now).Truncate(time.Second))
		if d.Stuck {
			v.Hold.EmptyMsg += ", past the stuck threshold"
		}
		v.Hold.EmptyMsg += "."
	}
	var holder *tlHolder
	switch {
	case rh != nil:
		holder = &tlHolder{Owner: rh.Owner, Lease: rh.Lease, Since: rh.Since}
	case d.Held:
		holder = &tlHolder{Owner: d.Owner, Lease: d.Lease, Since: d.Since}
	}
	v.Timeline = newTimeline(d.Recent, now, holder)
	for _, x := range d.WaitersNow {
		v.Waiters = append(v.Waiters, newWaiterRow(x, now))
	}
	for _, e := range d.Recent[:min(len(d.Recent), eventRows)] {
		row := eventRow{Clock: fmtClock(e.Time()), Ago: fmtAgo(now, e.Time()), AgoAt: fmtAbs(e.Time()), Type: e.Type.String(), Detail: eventDetail(e)}
		row.Owner, row.OwnerT = ownerText(e.Owner)
		v.Events = append(v.Events, row)
	}
	return v
}

func eventDetail(e event.Event) string {
	var parts []string
	if e.Wait > 0 {
		parts = append(parts, "waited "+fmtDuration(e.Wait))
	}
	if e.Hold > 0 {
		parts = append(parts, "held "+fmtDuration(e.Hold))
	}
	if e.TTL > 0 {
		parts = append(parts, "ttl "+fmtDuration(e.TTL))
	}
	if e.Attempts > 1 {
		parts = append(parts, strconv.Itoa(e.Attempts)+" attempts")
	}
	if e.Fence != 0 {
		parts = append(parts, "fence "+strconv.FormatInt(e.Fence, 10))
	}
	if e.Holder != "" {
		h, _ := displayKey(e.Holder)
		parts = append(parts, "held by "+shortKey(h, 40))
	}
	if e.By != "" {
		b, _ := displayKey(e.By)
		parts = append(parts, "by "+b)
	}
	if e.Reason != "" {
		rs, _ := displayKey(e.Reason)
		parts = append(parts, "reason: "+shortKey(rs, 120))
	}
	if e.Count > 0 {
		parts = append(parts, strconv.FormatInt(e.Count, 10)+" dropped")
	}
	if e.Degraded {
		parts = append(parts, "degraded")
	}
	return strings.Join(parts, " · ")
}

func newWaiterRow(x state.Waiter, now time.Time) waiterRow {
	row := waiterRow{Key: newKeyCell(x.Key), Waiting: fmtDuration(now.Sub(x.Since).Truncate(100 * time.Millisecond)),
		SinceTitle: x.Since.Format(time.RFC3339), Deadline: "in " + fmtDuration(x.Deadline.Sub(now).Truncate(time.Second))}
	if !x.Deadline.After(now) {
		row.Deadline = "passed"
	}
	row.Owner, row.OwnerT = ownerText(x.Owner)
	row.Holds = strconv.Itoa(len(x.Holds)) + " lock(s)"
	if len(x.Holds) == 0 {
		row.Holds = "none"
	}
	return row
}

// blockingPage is GET /blocking: holders ranked by the waiters they cause,
// waiting chains, deadlocks.
func (s *server) blockingPage(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	b := s.q.Blocking()
	v := blockingView{Page: s.page(r, "Blocking", "blocking"), Waiters: fmtCount(b.Waiters)}
	for _, h := range b.Holders {
		row := blockingRow{Key: newKeyCell(h.Key), Class: classText(h.Class), Waiters: fmtCount(h.Waiters),
			WaitSeconds: fmtDuration(time.Duration(h.WaitSeconds * float64(time.Second)).Truncate(100 * time.Millisecond)), HolderWaits: h.Waiting, HeldFor: "—"}
		row.Owner, row.OwnerT = ownerText(h.Owner)
		if !h.Since.IsZero() {
			row.HeldFor = fmtDuration(now.Sub(h.Since).Truncate(time.Second))
		}
		v.Holders = append(v.Holders, row)
	}
	for _, c := range b.Chains {
		cv := chainView{Cycle: c.Cycle}
		for _, l := range c.Links {
			lv := chainLinkView{}
			lv.Owner, lv.OwnerT = ownerText(l.Owner)
			if l.WaitsFor != "" {
				k := newKeyCell(l.WaitsFor)
				lv.WaitsFor = &k
				lv.Waiting = fmtDuration(now.Sub(l.Since).Truncate(100 * time.Millisecond))
			}
			cv.Links = append(cv.Links, lv)
		}
		v.Chains = append(v.Chains, cv)
	}
	s.render(w, r, http.StatusOK, blockingPage(v))
}

package dashboard

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/internal/lockjson"
)

// The keys page, GET /keys (keys.templ): every tracked key, searched,
// filtered, sorted and paginated, all in the URL. Its JSON mirror is
// GET /api/v1/locks, at the end of this file.

// keysView is the keys page's view model.
type keysView struct {
	Page     page
	Search   string
	Class    string
	HeldOnly bool
	State    string
	Sort     string
	Asc      bool
	Classes  []string
	Sorts    []tab             // sort choices as links (column headers)
	SortHref map[string]string // sort name → its link
	Rows     []lockRow
	Total    string
	From, To string
	PrevHref string
	NextHref string
	PageN    int
	Pages    int
	Empty    string // what to say when nothing matches
}

type lockRow struct {
	Key          keyCell
	Class        string
	Held         bool
	Stuck        bool
	Passive      bool
	NoExpiry     bool
	Owner        ownerCell
	HeldFor      string
	Waiters      string
	Acquisitions string
	Contentions  string
	WaitAvg      string
	HoldAvg      string
	LastEvent    string
	LastEventAt  string // absolute, for the title
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
			Key: newKeyCell(l.Key), Class: l.Class, Held: l.Held, Stuck: l.Stuck, Passive: l.Passive, NoExpiry: l.NoExpiry(),
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
			row.Owner = linkedOwnerCell(l.Owner)
			if !l.Since.IsZero() {
				row.HeldFor = fmtDuration(l.HeldFor(now).Truncate(time.Millisecond))
			}
		}
		v.Rows = append(v.Rows, row)
	}
	return v
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
	case "", state.StateHeld, state.StateStuck, state.StateWaited, state.StateNoExpiry, state.StateFree:
	default:
		return lq, errors.New("state must be one of held, stuck, waited, no-expiry, free")
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

// sortDir is the direction a sort orders rows in (aria-sort).
func sortDir(sort string) string {
	if sort == string(state.SortKey) {
		return "ascending"
	}
	return "descending"
}

func sortArrow(sort string) string {
	if sort == string(state.SortKey) {
		return "↑"
	}
	return "↓"
}

// apiLockInfo is one tracked key as GET /api/v1/locks lists it (and as
// GET /api/v1/locks/{key} begins).
type apiLockInfo struct {
	Key          string     `json:"key"`
	KeyB64       string     `json:"key_b64,omitempty"`
	Class        string     `json:"class"`
	Held         bool       `json:"held"`
	Owner        string     `json:"owner,omitempty"`
	OwnerB64     string     `json:"owner_b64,omitempty"`
	Lease        string     `json:"lease,omitempty"`
	Since        *time.Time `json:"since,omitempty"`
	HeldFor      float64    `json:"held_for_seconds"`
	TTL          float64    `json:"ttl_seconds"` // -1: no expiry
	NoExpiry     bool       `json:"no_expiry,omitempty"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"`
	Fence        int64      `json:"fence,omitempty"`
	Waiters      int        `json:"waiters"`
	Stuck        bool       `json:"stuck"`
	StuckAfter   float64    `json:"stuck_after_seconds"`  // the class's stuck threshold
	StuckRule    string     `json:"stuck_rule,omitempty"` // the --stuck-after CLASS_GLOB that set it; absent for the default
	Degraded     bool       `json:"degraded,omitempty"`
	Passive      bool       `json:"passive,omitempty"`
	Acquisitions int64      `json:"acquisitions"`
	Contentions  int64      `json:"contentions"`
	Failures     int64      `json:"failures"`
	WaitTotal    float64    `json:"wait_total_seconds"`
	HoldTotal    float64    `json:"hold_total_seconds"`
	LastEvent    *time.Time `json:"last_event,omitempty"`
	TraceID      string     `json:"trace_id,omitempty"`              // of the call that obtained the current (or last) hold
	LastHeadroom *float64   `json:"last_headroom_seconds,omitempty"` // TTL left when the hold's last renewal landed
	MinHeadroom  *float64   `json:"min_headroom_seconds,omitempty"`  // the least any of its renewals left
	Href         string     `json:"href"`
}

func newAPILockInfo(l state.LockInfo, now time.Time) apiLockInfo {
	i := apiLockInfo{
		Key: l.Key, KeyB64: keytext.B64IfInvalid(l.Key), Class: l.Class, Held: l.Held,
		Owner: l.Owner, OwnerB64: keytext.B64IfInvalid(l.Owner), Lease: l.Lease,
		Since: lockjson.Time(l.Since), HeldFor: seconds(l.HeldFor(now)), TTL: seconds(l.TTL), ExpiresAt: lockjson.Time(l.ExpiresAt),
		Fence: l.Fence, Waiters: l.Waiters, Stuck: l.Stuck, Degraded: l.Degraded, Passive: l.Passive, NoExpiry: l.NoExpiry(),
		StuckAfter: seconds(l.StuckAfter), StuckRule: l.StuckRule,
		Acquisitions: l.Acquisitions, Contentions: l.Contentions, Failures: l.Failures,
		WaitTotal: seconds(l.WaitTotal), HoldTotal: seconds(l.HoldTotal), LastEvent: lockjson.Time(l.LastEvent),
		TraceID: l.Trace.String(), Href: apiLockPath(l.Key),
	}
	if i.NoExpiry {
		i.TTL = -1
	}
	if l.LastHeadroom > 0 {
		last, least := seconds(l.LastHeadroom), seconds(l.MinHeadroom)
		i.LastHeadroom, i.MinHeadroom = &last, &least
	}
	return i
}

type apiLockPage struct {
	Total  int           `json:"total"`
	Offset int           `json:"offset"`
	Limit  int           `json:"limit"`
	Locks  []apiLockInfo `json:"locks"`
}

// apiLocks is GET /api/v1/locks?q=&class=&held=1&sort=contentions&order=desc&offset=0&limit=50.
func (s *server) apiLocks(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	lq, err := lockQuery(qs, state.SortContentions)
	if err != nil {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	var ok1, ok2 bool
	lq.Offset, ok1 = atoiDefault(qs.Get("offset"), 0, 0, 1<<30)
	lq.Limit, ok2 = atoiDefault(qs.Get("limit"), 50, 1, 500)
	if !ok1 || !ok2 {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "offset must be >= 0 and limit 1..500"})
		return
	}
	now := s.now()
	res := s.q.Locks(lq)
	v := apiLockPage{Total: res.Total, Offset: lq.Offset, Limit: lq.Limit, Locks: make([]apiLockInfo, 0, len(res.Locks))}
	for _, l := range res.Locks {
		v.Locks = append(v.Locks, newAPILockInfo(l, now))
	}
	writeJSON(w, r, http.StatusOK, v)
}

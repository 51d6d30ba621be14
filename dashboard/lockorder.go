package dashboard

import (
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/keytext"
)

// Lock order: the inversions (classes taken in opposite orders, a deadlock
// that has not happened yet) and the orders seen, as a section any page
// can show (lockorder.templ: lockOrderSection), for every class (/blocking)
// or one (newLockOrderView of Querier.LockOrder(class)). Its JSON is
// GET /api/v1/lockorder[?class=], at the end of this file.

// lockOrderEdgesShown is how many orders the section lists (the most
// recently seen); the API lists them all.
const lockOrderEdgesShown = 50

// lockOrderView is the section's view model.
type lockOrderView struct {
	Class      string // "": every class
	Window     string
	Inversions []inversionView
	Edges      []orderView
	MoreEdges  string // how many more orders the API lists, "" for none
	Dropped    string // orders not tracked past the graph's bound, "" for none
}

type inversionView struct {
	Classes   []string
	Orders    []orderView
	FirstSeen string
	LastSeen  string
}

type orderView struct {
	From, To         string
	FromHref, ToHref string
	Count            string
	Times            string // Count in words: "once", "3 times"
	Owners           []ownerCell
	MoreOwners       bool
	FromKey, ToKey   keyCell
	FirstSeen        string
	LastSeen         string
	Reversed         bool // its reverse is an order too (in an inversion)
}

// newLockOrderView builds the section from the state's graph at now.
func newLockOrderView(lo state.LockOrder, class string, now time.Time) lockOrderView {
	v := lockOrderView{Class: class, Window: fmtDuration(lo.Window)}
	if lo.Dropped > 0 {
		v.Dropped = fmtCount(lo.Dropped)
	}
	inverted := map[[2]string]bool{}
	for _, in := range lo.Inversions {
		iv := inversionView{Classes: make([]string, len(in.Classes)), FirstSeen: fmtAgo(now, in.FirstSeen), LastSeen: fmtAgo(now, in.LastSeen)}
		for i, c := range in.Classes {
			iv.Classes[i] = classText(c)
		}
		for _, e := range in.Orders {
			inverted[[2]string{e.From, e.To}] = true
			iv.Orders = append(iv.Orders, newOrderView(e, now))
		}
		v.Inversions = append(v.Inversions, iv)
	}
	// The most recently seen orders first.
	edges := slices.Clone(lo.Edges)
	slices.SortStableFunc(edges, func(a, b state.OrderEdge) int { return b.LastSeen.Compare(a.LastSeen) })
	if len(edges) > lockOrderEdgesShown {
		v.MoreEdges = fmtCount(len(edges) - lockOrderEdgesShown)
		edges = edges[:lockOrderEdgesShown]
	}
	for _, e := range edges {
		ov := newOrderView(e, now)
		ov.Reversed = inverted[[2]string{e.From, e.To}]
		v.Edges = append(v.Edges, ov)
	}
	return v
}

func newOrderView(e state.OrderEdge, now time.Time) orderView {
	ov := orderView{From: classText(e.From), To: classText(e.To), FromHref: classKeysPath(e.From), ToHref: classKeysPath(e.To),
		Count: fmtCount(e.Count), Times: fmtTimes(e.Count), MoreOwners: e.MoreOwners, FromKey: newKeyCell(e.FromKey), ToKey: newKeyCell(e.ToKey),
		FirstSeen: fmtAgo(now, e.FirstSeen), LastSeen: fmtAgo(now, e.LastSeen)}
	for _, o := range e.Owners {
		ov.Owners = append(ov.Owners, linkedOwnerCell(o))
	}
	return ov
}

// classKeysPath lists the keys of a class.
func classKeysPath(class string) string { return "/keys?" + url.Values{"class": {class}}.Encode() }

type apiOrderExample struct {
	FromKey    string `json:"from_key"`
	FromKeyB64 string `json:"from_key_b64,omitempty"`
	ToKey      string `json:"to_key"`
	ToKeyB64   string `json:"to_key_b64,omitempty"`
}

type apiOrderEdge struct {
	From       string          `json:"from"`
	To         string          `json:"to"`
	Count      int64           `json:"count"`
	Owners     []string        `json:"owners"`
	MoreOwners bool            `json:"more_owners,omitempty"`
	FirstSeen  time.Time       `json:"first_seen"`
	LastSeen   time.Time       `json:"last_seen"`
	Example    apiOrderExample `json:"example"`
}

type apiInversion struct {
	Classes   []string       `json:"classes"`
	Owners    []string       `json:"owners"`
	Orders    []apiOrderEdge `json:"orders"`
	FirstSeen time.Time      `json:"first_seen"`
	LastSeen  time.Time      `json:"last_seen"`
}

type apiLockOrder struct {
	At            time.Time      `json:"at"`
	Class         string         `json:"class,omitempty"`
	WindowSeconds float64        `json:"window_seconds"`
	Edges         []apiOrderEdge `json:"edges"`
	Inversions    []apiInversion `json:"inversions"`
	EdgesDropped  int64          `json:"edges_dropped"`
}

func apiEdge(e state.OrderEdge) apiOrderEdge {
	owners := e.Owners
	if owners == nil {
		owners = []string{}
	}
	return apiOrderEdge{From: e.From, To: e.To, Count: e.Count, Owners: owners, MoreOwners: e.MoreOwners,
		FirstSeen: e.FirstSeen.UTC(), LastSeen: e.LastSeen.UTC(),
		Example: apiOrderExample{FromKey: e.FromKey, FromKeyB64: keytext.B64IfInvalid(e.FromKey), ToKey: e.ToKey, ToKeyB64: keytext.B64IfInvalid(e.ToKey)}}
}

// apiLockOrder is GET /api/v1/lockorder[?class=CLASS]: the lock-order
// graph's edges and inversions (of one class: the edges from or to it, the
// inversions through it).
func (s *server) apiLockOrder(w http.ResponseWriter, r *http.Request) {
	class := r.URL.Query().Get("class")
	lo := s.q.LockOrder(class)
	v := apiLockOrder{At: s.now().UTC(), Class: class, WindowSeconds: lo.Window.Seconds(), EdgesDropped: lo.Dropped,
		Edges: make([]apiOrderEdge, 0, len(lo.Edges)), Inversions: make([]apiInversion, 0, len(lo.Inversions))}
	for _, e := range lo.Edges {
		v.Edges = append(v.Edges, apiEdge(e))
	}
	for _, in := range lo.Inversions {
		ai := apiInversion{Classes: in.Classes, Owners: in.Owners, FirstSeen: in.FirstSeen.UTC(), LastSeen: in.LastSeen.UTC()}
		if ai.Owners == nil {
			ai.Owners = []string{}
		}
		for _, e := range in.Orders {
			ai.Orders = append(ai.Orders, apiEdge(e))
		}
		v.Inversions = append(v.Inversions, ai)
	}
	writeJSON(w, r, http.StatusOK, v)
}

// fmtTimes says how often: "once", "2 times".
func fmtTimes(n int64) string {
	if n == 1 {
		return "once"
	}
	return fmtCount(n) + " times"
}

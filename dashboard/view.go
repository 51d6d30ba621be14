package dashboard

import (
	"net/http"
	"strconv"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/lock"
)

// View models: small structs of display-ready strings that the templ
// components turn into markup. Building them is the handlers' job; the
// components make no decisions beyond showing or hiding.

// page is what every page shares.
type page struct {
	Title    string
	Nav      string // "overview", "keys" or "" (highlights the nav link)
	Nonce    string
	ReadOnly bool   // releases disabled by configuration
	Operator string // the signed-in operator, "" if anonymous
	Ingest   string // why the collector is not ingesting, "" when healthy
	Live     bool   // the page refreshes itself (not forms)
	Clock    string // when the page was rendered
	// Deadlocks are the wait-for cycles now, shown as a banner on every page.
	Deadlocks []deadlockView
}

// deadlockView is one cycle: each member holds one key and waits for the next.
type deadlockView struct {
	Members []deadlockMember
	Since   string
}

type deadlockMember struct {
	Owner, OwnerT string
	Holds         keyCell
	WaitsFor      keyCell
	ReleaseHref   string // forced release of the key it holds; "" when read-only
}

// waiterRow is one caller waiting for a key now.
type waiterRow struct {
	Owner, OwnerT string
	Key           keyCell
	Waiting       string // for how long
	SinceTitle    string // absolute time, on hover
	Deadline      string
	Holds         string // leases it holds while waiting
}

// blockingView is the /blocking page.
type blockingView struct {
	Page    page
	Waiters string
	Holders []blockingRow
	Chains  []chainView
}

type blockingRow struct {
	Key           keyCell
	Class         string
	Owner, OwnerT string
	HeldFor       string
	Waiters       string
	WaitSeconds   string
	HolderWaits   bool
}

type chainView struct {
	Links []chainLinkView
	Cycle bool
}

type chainLinkView struct {
	Owner, OwnerT string
	WaitsFor      *keyCell // nil for the final holder
	Waiting       string
}

func (s *server) page(r *http.Request, title, nav string) page {
	p := page{
		Title:    title,
		Nav:      nav,
		Nonce:    nonceFrom(r.Context()),
		ReadOnly: s.readOnly(),
		Operator: operatorFrom(r.Context()),
		Live:     true,
		Clock:    s.now().Format("15:04:05"),
	}
	if err := s.q.Health(); err != nil {
		p.Ingest = err.Error()
	}
	for _, c := range s.q.Deadlocks() {
		var d deadlockView
		var since time.Time
		for _, m := range c.Members {
			dm := deadlockMember{Holds: newKeyCell(m.Holds), WaitsFor: newKeyCell(m.WaitsFor)}
			dm.Owner, dm.OwnerT = ownerText(m.Owner)
			if !p.ReadOnly {
				dm.ReleaseHref = releasePath(m.Holds)
			}
			d.Members = append(d.Members, dm)
			if since.IsZero() || m.Since.After(since) {
				since = m.Since // the cycle closed when its last member began to wait
			}
		}
		d.Since = fmtAgo(s.now(), since)
		p.Deadlocks = append(p.Deadlocks, d)
	}
	return p
}

// keyCell is how a key shows in tables: cut for the cell, full on hover.
type keyCell struct {
	Href    string
	Text    string // display form, shortened
	Full    string // display form, complete
	Escaped bool   // the display form escapes control or invalid bytes
}

const keyCellMax = 80

func newKeyCell(key string) keyCell {
	disp, esc := displayKey(key)
	return keyCell{Href: keyPath(key), Text: shortKey(disp, keyCellMax), Full: disp, Escaped: esc}
}

// classText shows a class name, which is derived from raw keys and so may
// hold any byte, the way keys are shown.
func classText(class string) string {
	disp, _ := displayKey(class)
	return shortKey(disp, 120)
}

func ownerText(owner string) (short, full string) {
	disp, _ := displayKey(owner)
	return shortKey(disp, 48), disp
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

// tab is a link that selects a view (window, ranking, sort).
type tab struct {
	Label  string
	Href   string
	Active bool
}

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

type hotRow struct {
	Rank         int
	Key          keyCell
	Class        string
	Contentions  string
	Wait         string
	Acquisitions string
	Bar          string // meter width 0..100 of the ranked figure
	Approx       string // space-saving bound, "" when exact
}

type stuckRow struct {
	Key     keyCell
	Owner   string
	OwnerT  string
	HeldFor string
	Waiters string
	TTL     string
}

type expirationRow struct {
	Key       keyCell
	Owner     string
	OwnerT    string
	Ago       string
	AgoAt     string // absolute, for the title
	Held      string
	Confirmed bool
}

type forcedRow struct {
	Key    keyCell
	Owner  string
	OwnerT string
	By     string
	Reason string
	Ago    string
	AgoAt  string // absolute, for the title
}

type footerItem struct{ Label, Value string }

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
	Owner        string
	OwnerT       string
	HeldFor      string
	Waiters      string
	Acquisitions string
	Contentions  string
	WaitAvg      string
	HoldAvg      string
	LastEvent    string
	LastEventAt  string // absolute, for the title
}

type keyView struct {
	Page        page
	Key         keyCell
	Bytes       string // key length in bytes
	Class       string
	Known       bool // the collector tracks the key
	State       string
	Holder      *holderView // who holds it per the collector
	Redis       *holderView // who holds it per Redis right now
	RedisNote   string      // "not held in Redis", or an error
	Stats       []footerItem
	Rate        *spark
	RateStep    string
	Wait        distView
	Hold        distView
	Timeline    timelineView
	Events      []eventRow
	ReleaseHref string
	CanRelease  bool
	Waiters     []waiterRow // callers waiting for the key now
}

type holderView struct {
	Owner       string
	OwnerT      string
	Lease       string
	Since       string
	SinceAgo    string
	HeldFor     string
	TTL         string
	Fence       string
	Fingerprint string
	Value       string // a foreign lock's raw value: operators' pages only
	NoExpiry    bool   // held without a TTL
	Foreign     bool
	Degraded    bool
	Passive     bool
	Stuck       bool
	Waiters     string
}

type eventRow struct {
	Clock  string
	Ago    string
	AgoAt  string // absolute, for the title
	Type   string
	Owner  string
	OwnerT string
	Detail string
}

type releaseView struct {
	Page        page
	Key         keyCell
	Holder      holderView
	Fingerprint string
	Ambiguous   bool // the value cannot tell holder from successor
	NeedAccept  bool // ...nor can an expiry: the operator must accept releasing whoever holds it
	Action      string
	Reason      string
	Error       string
	MaxReason   int
	Back        string
}

type releaseResultView struct {
	Page      page
	Key       keyCell
	Outcome   string // "released", "owner-changed", "not-held"
	Heading   string
	Message   string
	Previous  *holderView // the holder that was released
	Current   *holderView // the holder now, after an owner change
	By        string
	Reason    string
	RetryHref string
	Back      string
}

type errorView struct {
	Page    page
	Status  int
	Message string
}

func (s *server) holderFromInfo(l state.LockInfo, now time.Time) *holderView {
	if !l.Held {
		return nil
	}
	h := &holderView{
		Lease:    l.Lease,
		Fence:    fenceText(l.Fence),
		Degraded: l.Degraded,
		Passive:  l.Passive,
		Stuck:    l.Stuck,
		Waiters:  fmtCount(l.Waiters),
	}
	h.OwnerT, h.Owner = ownerText(l.Owner)
	if !l.Since.IsZero() {
		h.Since = fmtAbs(l.Since)
		h.SinceAgo = fmtAgo(now, l.Since)
		h.HeldFor = fmtDuration(l.HeldFor(now).Truncate(time.Millisecond))
	}
	if l.NoExpiry() {
		h.TTL, h.NoExpiry = "never expires", true
	} else if !l.ExpiresAt.IsZero() {
		h.TTL = fmtDuration(l.ExpiresAt.Sub(now).Truncate(time.Millisecond))
		if l.ExpiresAt.Before(now) {
			h.TTL = "expired " + fmtAgo(now, l.ExpiresAt)
		}
	} else if l.TTL > 0 {
		h.TTL = fmtDuration(l.TTL)
	}
	return h
}

func holderFromLock(h *lock.Holder, now time.Time) *holderView {
	v := &holderView{
		Lease:       h.Lease,
		Fence:       fenceText(h.Fence),
		TTL:         ttlText(h.TTL),
		NoExpiry:    h.TTL < 0,
		Fingerprint: h.Fingerprint,
		Foreign:     h.Foreign,
		Degraded:    h.Degraded,
	}
	v.OwnerT, v.Owner = ownerText(h.Owner)
	if !h.Since.IsZero() {
		v.Since = fmtAbs(h.Since)
		v.SinceAgo = fmtAgo(now, h.Since)
		v.HeldFor = fmtDuration(now.Sub(h.Since).Truncate(time.Millisecond))
	}
	return v
}

// sinceFromCollector gives a holder read from Redis without an acquisition
// time (a foreign lock: its value carries none) the time the collector saw
// that same holder acquire it.
func sinceFromCollector(v *holderView, h *lock.Holder, l state.LockInfo, now time.Time) {
	if v.Since != "" || !l.Held || l.Since.IsZero() || l.Owner != h.Owner {
		return
	}
	v.Since = fmtAbs(l.Since)
	v.SinceAgo = fmtAgo(now, l.Since)
	v.HeldFor = fmtDuration(l.HeldFor(now).Truncate(time.Millisecond))
}

func ttlText(d time.Duration) string {
	if d < 0 {
		return "never expires"
	}
	return fmtDuration(d.Truncate(time.Millisecond))
}

// fenceText shows a fencing token as the raw number it is compared as.
func fenceText(f int64) string {
	if f == 0 {
		return ""
	}
	return strconv.FormatInt(f, 10)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
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

package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/lock"
)

// One owner's page, GET /owners/{owner} (owner.templ): every lock the
// owner holds per the collector, and for operators a "release all N" form
// (POST /owners/{owner}/release) for the night a pod died holding 40 locks.
// Its JSON mirror, GET /api/v1/owners/{owner}, is at the end of this file.
//
// Release only the holder the page names, for each key: the page asks Redis
// for each key's holder and offers the key only when Redis's value names
// this owner (ownerVerdict), embedding its fingerprint in a hidden field;
// the POST checks each key again by the same rule and releases it only if
// its value still has that fingerprint (the per-key release's check,
// through the same forceRelease), and reports each: released, skipped
// because the holder changed, skipped because it was already free, or an
// error. A POST's Redis work is bounded as a whole (ownerReleaseBudget). Each release is a forced event with the
// reason; the collector folds the forced events of one owner, operator
// and reason into one forced incident (ten-minute buckets), so a bulk
// release is one incident listing its keys.

// ownerLocksMax bounds the locks one owner page lists and one POST
// releases: an owner holding more is released in several rounds.
const ownerLocksMax = 500

// ownerInspectParallel is how many holders the page asks Redis for at once.
const ownerInspectParallel = 8

// ownerView is the owner page's view model, before and after a release.
type ownerView struct {
	Page       page
	Owner      string // display form
	Escaped    bool   // the display form escapes control or invalid bytes
	Rows       []ownerRow
	Total      int // locks the owner holds per the collector
	More       string
	CanRelease bool // an operator on a dashboard that can release
	Releasable int  // rows whose holder Redis confirms, with a fingerprint
	Action     string
	Back       string // the owner page, from the result page
	Reason     string
	Error      string
	MaxReason  int
	// After a POST:
	Results  []ownerResultRow
	Summary  string
	Released int

	AskAction string // the ask-all action ("" when the dashboard cannot ask); owner_ask.go
	Askable   int    // offered rows whose holder listens for release requests
}

type ownerRow struct {
	Key         keyCell
	Class       string
	Since       string
	HeldFor     string
	LeaseTTL    string
	Fingerprint string // operators: the holder Redis has now
	Field       string // the hidden field: fingerprint, a space, the key as a path segment
	State       string // "" releasable; "changed", "free", "ambiguous", "error": not in the form
	Note        string
}

type ownerResultRow struct {
	Key     keyCell
	Outcome string // released, changed, free, ambiguous, error
	Text    string
}

// ownerPath is the page of owner; "" for no owner.
func ownerPath(owner string) string {
	if owner == "" {
		return ""
	}
	return "/owners/" + keytext.PathSegment(owner)
}

// ownerReleasePath is the release-all action of owner.
func ownerReleasePath(owner string) string { return ownerPath(owner) + "/release" }

// ownerFromRequest decodes the {owner} route variable.
func ownerFromRequest(r *http.Request) (string, bool) {
	raw, ok := mux.Vars(r)["owner"]
	if !ok || raw == "" {
		return "", false
	}
	owner, err := url.PathUnescape(raw)
	if err != nil || owner == "" {
		return "", false
	}
	return owner, true
}

// ownerLocks is what the collector says owner holds now, by key.
func (s *server) ownerLocks(owner string) state.LockPage {
	return s.q.Locks(state.LockQuery{Owner: owner, HeldOnly: true, Sort: state.SortKey, Limit: ownerLocksMax})
}

// ownerPage is GET /owners/{owner}.
func (s *server) ownerPage(w http.ResponseWriter, r *http.Request) {
	owner, ok := ownerFromRequest(r)
	if !ok {
		s.fail(w, r, false, http.StatusBadRequest, "bad owner in path")
		return
	}
	v := s.ownerView(r, owner)
	s.render(w, r, http.StatusOK, ownerPageView(v))
}

func (s *server) ownerView(r *http.Request, owner string) ownerView {
	now := s.now()
	p := s.page(r, "Owner", "keys")
	v := ownerView{Page: p, Action: ownerReleasePath(owner), MaxReason: MaxReason}
	v.Owner, v.Escaped = keytext.Visible(owner)
	locks := s.ownerLocks(owner)
	v.Total = locks.Total
	if locks.Total > len(locks.Locks) {
		v.More = "Showing the first " + fmtCount(len(locks.Locks)) + " of " + fmtCount(locks.Total) + " locks, by key: release them, then reload for the rest."
	}
	v.CanRelease = !p.ReadOnly && p.Operator != ""
	var holders []*lock.Holder
	var errs []error
	if v.CanRelease {
		// Operators release what they see: Redis's holder of each key now.
		v.Page.Live = false
		holders, errs = s.inspectAll(r.Context(), locks.Locks)
	}
	for i, l := range locks.Locks {
		row := ownerRow{Key: newKeyCell(l.Key), Class: l.Class, HeldFor: "—", LeaseTTL: "—"}
		if !l.Since.IsZero() {
			row.Since = fmtAbs(l.Since)
			row.HeldFor = fmtDuration(l.HeldFor(now).Truncate(time.Millisecond))
		}
		switch {
		case l.NoExpiry():
			row.LeaseTTL = "never expires"
		case l.TTL > 0:
			row.LeaseTTL = fmtDuration(l.TTL)
		}
		if v.CanRelease {
			row.State, row.Note = ownerVerdict(owner, l, holders[i], errs[i])
			if row.State == "" {
				h := holders[i]
				row.Fingerprint = h.Fingerprint
				row.Field = h.Fingerprint + " " + keytext.PathSegment(l.Key)
				v.Releasable++
			}
		}
		v.Rows = append(v.Rows, row)
	}
	if v.CanRelease && s.asker() != nil {
		v.AskAction, v.Askable = ownerAskPath(owner), s.askableOf(r.Context(), v.Rows, holders)
	}
	return v
}

// inspectAll asks Redis for the holder of each lock's key, a few at a time.
func (s *server) inspectAll(ctx context.Context, locks []state.LockInfo) ([]*lock.Holder, []error) {
	holders := make([]*lock.Holder, len(locks))
	errs := make([]error, len(locks))
	sem := make(chan struct{}, ownerInspectParallel)
	var wg sync.WaitGroup
	for i, l := range locks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			holders[i], errs[i] = s.inspect(ctx, l.Key)
		})
	}
	wg.Wait()
	return holders, errs
}

// ownerVerdict says whether h, what Redis holds under l.Key now, is the hold
// the collector lists as owner's (l): "" when it is, else the row's state
// ("free", "changed", "ambiguous", "error") and a note. It is the one rule
// by which an owner page offers a key and its POST releases it.
//
// Redis's value must name the page's owner itself: a lockscope value by its
// owner field (and, when the collector knows the hold's lease, by that
// lease, so that the same owner's newer hold is not the one listed), another
// library's token by the name lockscope gives it (lock.ForeignOwner, which
// is how the passive watcher names that holder). The collector's word alone
// is not enough: it can be a moment stale (the key changed hands since its
// last event) or a stream writer's forgery naming any owner for any key.
func ownerVerdict(owner string, l state.LockInfo, h *lock.Holder, err error) (verdict, note string) {
	switch {
	case err != nil:
		return "error", "Redis could not be asked who holds it: " + err.Error()
	case h == nil:
		return "free", "free now: Redis holds no lock under this key"
	case h.Owner != owner:
		short := newOwnerCell(h.Owner).Short
		if h.Foreign {
			return "changed", "Redis's value names another holder (" + short + "): release it on its key page"
		}
		return "changed", "held by " + short + " now"
	case !h.Foreign && l.Lease != "" && h.Lease != l.Lease:
		return "changed", "a newer hold of this owner (lease " + keytext.Terminal(h.Lease, 40) + "), not the one listed"
	case h.NeedsAnyHolder():
		return "ambiguous", "a constant value without expiry: release it on its own page"
	}
	return "", ""
}

// ownerFieldRE is one hidden field of the release-all form. "@any" is not
// accepted: an owner page releases only holders it could tell apart.
var ownerFieldRE = regexp.MustCompile(`^([0-9a-fA-F]{1,128}(?:@-?[0-9]{1,20})?) (\S+)$`)

// ownerReleaseBudget bounds the Redis work of one release-all POST by
// default (Options.ReleaseAllBudget): with Redis stalled, every key not
// reached within it is reported as an error (nothing was done to it),
// rather than the POST waiting releaseTimeout per key (500 keys: some 40
// minutes).
const ownerReleaseBudget = 30 * time.Second

func (s *server) releaseAllBudget() time.Duration {
	if s.opt.ReleaseAllBudget > 0 {
		return s.opt.ReleaseAllBudget
	}
	return ownerReleaseBudget
}

// ownerReleasePage is POST /owners/{owner}/release: the form carries a
// reason and, per key, the fingerprint the page showed.
func (s *server) ownerReleasePage(w http.ResponseWriter, r *http.Request) {
	owner, ok := ownerFromRequest(r)
	if !ok {
		s.fail(w, r, false, http.StatusBadRequest, "bad owner in path")
		return
	}
	// A page's worth of keys (each at most a few kB escaped) and a reason.
	r.Body = http.MaxBytesReader(w, r.Body, 8<<20)
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, false, http.StatusBadRequest, "bad form: "+err.Error())
		return
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	type target struct{ key, fingerprint string }
	var targets []target
	var formErr string
	for _, f := range r.PostForm["lock"] {
		var key string
		m := ownerFieldRE.FindStringSubmatch(f)
		if m != nil {
			key, _ = url.PathUnescape(m[2]) // "" when it does not unescape
		}
		if key == "" {
			formErr = "the form's list of locks is damaged: reload the page"
			break
		}
		targets = append(targets, target{key: key, fingerprint: m[1]})
	}
	if formErr == "" {
		switch err := validReason(reason); {
		case err != nil:
			formErr = err.Error()
		case len(targets) == 0:
			formErr = "no lock to release: every lock on this page changed or is free"
		case len(targets) > ownerLocksMax:
			formErr = "at most " + strconv.Itoa(ownerLocksMax) + " locks at once"
		}
	}
	if formErr != "" {
		v := s.ownerView(r, owner)
		v.Reason, v.Error = reason, formErr
		s.render(w, r, http.StatusUnprocessableEntity, ownerPageView(v))
		return
	}
	operator := operatorFrom(r.Context())
	p := s.page(r, "Owner", "keys")
	p.Live = false
	v := ownerView{Page: p, Reason: reason, MaxReason: MaxReason, Back: ownerPath(owner)}
	v.Owner, v.Escaped = keytext.Visible(owner)
	ctx, cancel := context.WithTimeout(r.Context(), s.releaseAllBudget())
	defer cancel()
	// The form is the operator's word for which holder to release, not
	// proof of it: each key is checked again by the rule the page used
	// (ownerVerdict), against the collector's list of this owner's locks
	// now and Redis's holder now, and released only if Redis still holds
	// the fingerprint the page showed (one script, ForceRelease).
	listed := map[string]state.LockInfo{}
	for _, l := range s.ownerLocks(owner).Locks {
		listed[l.Key] = l
	}
	results := make([]ownerResultRow, len(targets))
	sem := make(chan struct{}, ownerInspectParallel)
	var wg sync.WaitGroup
	for i, t := range targets {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i] = s.releaseOwned(ctx, owner, listed, t.key, t.fingerprint, operator, reason)
		})
	}
	wg.Wait()
	var changed, free, failed int
	for _, row := range results {
		switch row.Outcome {
		case "released":
			v.Released++
		case "changed":
			changed++
		case "free":
			free++
		default:
			failed++
		}
	}
	v.Results = results
	v.Summary = fmtCount(v.Released) + " released, " + fmtCount(changed) + " skipped (holder changed), " + fmtCount(free) + " skipped (already free)"
	if failed > 0 {
		v.Summary += ", " + plural(failed, "error", "errors")
	}
	v.Summary += "; recorded as forced by " + operator + ": " + reason
	s.log.Info("lockscope: forced release of an owner's locks", append(append([]any{"by", operator}, keytext.LogAttrs("owner", owner)...),
		"reason", reason, "released", v.Released, "changed", changed, "free", free, "errors", failed)...)
	status := http.StatusOK
	if failed > 0 && failed == len(targets) {
		status = http.StatusBadGateway
	}
	s.render(w, r, status, ownerResult(v))
}

// releaseOwned releases key for a release-all of owner's locks, only if it
// is still the hold the page showed: listed by the collector as owner's,
// held in Redis by a value that names owner (ownerVerdict) and has the
// page's fingerprint.
func (s *server) releaseOwned(ctx context.Context, owner string, listed map[string]state.LockInfo, key, fingerprint, operator, reason string) ownerResultRow {
	row := ownerResultRow{Key: newKeyCell(key)}
	if ctx.Err() != nil {
		row.Outcome, row.Text = "error", "error: not attempted: Redis did not answer the keys before it within "+fmtDuration(s.releaseAllBudget())
		return row
	}
	h, err := s.inspect(ctx, key)
	l, listedNow := listed[key]
	switch verdict, note := ownerVerdict(owner, l, h, err); {
	case verdict == "" && !listedNow:
		row.Outcome, row.Text = "changed", "skipped: the collector no longer lists it as this owner's"
		return row
	case verdict == "free":
		row.Outcome, row.Text = "free", "skipped: already free"
		return row
	case verdict == "error":
		row.Outcome, row.Text = "error", "error: "+note
		return row
	case verdict != "":
		row.Outcome, row.Text = "changed", "skipped: "+note
		return row
	case h.Fingerprint != fingerprint:
		short := newOwnerCell(h.Owner).Short
		row.Outcome, row.Text = "changed", "skipped: the holder changed (now "+short+")"
		return row
	}
	out := s.forceRelease(ctx, key, operator, releaseRequest{Fingerprint: fingerprint, Reason: reason})
	switch out.kind {
	case "released":
		row.Outcome, row.Text = "released", "released"
	case "owner-changed":
		row.Outcome, row.Text = "changed", "skipped: the holder changed"
		if out.current != nil {
			short := newOwnerCell(out.current.Owner).Short
			row.Text += " (now " + short + ")"
		}
	case "ambiguous":
		row.Outcome, row.Text = "changed", "skipped: a constant value without expiry cannot be told from a successor's"
	case "not-held":
		row.Outcome, row.Text = "free", "skipped: already free"
	default:
		row.Outcome, row.Text = "error", "error: "+out.err.Error()
	}
	return row
}

// shortFingerprint is the first 12 hex digits the command line shows too
// ('lockscope locks'); the whole one is on hover.
func shortFingerprint(fp string) string {
	if len(fp) <= 12 {
		return fp
	}
	return fp[:12] + "…"
}

// apiOwnerLock is one lock in GET /api/v1/owners/{owner}.
type apiOwnerLock struct {
	Key        string     `json:"key"`
	KeyB64     string     `json:"key_b64,omitempty"`
	Class      string     `json:"class"`
	Since      *time.Time `json:"since,omitempty"`
	TTLSeconds float64    `json:"ttl_seconds,omitempty"` // the lease TTL the holder set; absent without expiry
	Passive    bool       `json:"passive,omitempty"`
}

type apiOwner struct {
	Owner    string         `json:"owner"`
	OwnerB64 string         `json:"owner_b64,omitempty"`
	Total    int            `json:"total"`
	Locks    []apiOwnerLock `json:"locks"`
}

// apiOwnerLocks is GET /api/v1/owners/{owner}: what the owner page lists,
// without fingerprints (a release goes key by key through
// POST /api/v1/locks/{key}/release, after GET /api/v1/locks/{key}).
func (s *server) apiOwnerLocks(w http.ResponseWriter, r *http.Request) {
	owner, ok := ownerFromRequest(r)
	if !ok {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "bad owner in path"})
		return
	}
	locks := s.ownerLocks(owner)
	out := apiOwner{Owner: owner, OwnerB64: keytext.B64IfInvalid(owner), Total: locks.Total, Locks: make([]apiOwnerLock, 0, len(locks.Locks))}
	for _, l := range locks.Locks {
		j := apiOwnerLock{Key: l.Key, KeyB64: keytext.B64IfInvalid(l.Key), Class: l.Class, Passive: l.Passive}
		if !l.Since.IsZero() {
			since := l.Since.UTC()
			j.Since = &since
		}
		if l.TTL > 0 {
			j.TTLSeconds = l.TTL.Seconds()
		}
		out.Locks = append(out.Locks, j)
	}
	writeJSON(w, r, http.StatusOK, out)
}

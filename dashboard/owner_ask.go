package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/lock"
)

// "Ask all" on an owner page, POST /owners/{owner}/ask: the release-all
// form's other button. It asks each listed holder to release by the rule
// the release-all follows (ownerVerdict, then the page's fingerprint):
// only the hold the page named is asked, never a key's newer holder, and a
// holder that cannot hear is skipped and reported, not asked.

// ownerAskPath is the ask-all action of owner.
func ownerAskPath(owner string) string { return ownerPath(owner) + "/ask" }

// askableOf counts the offered rows (ownerVerdict passed) whose holder
// listens for release requests, asking Redis a few at a time.
func (s *server) askableOf(ctx context.Context, rows []ownerRow, holders []*lock.Holder) int {
	a := s.asker()
	if a == nil || len(holders) != len(rows) {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	var mu sync.Mutex
	n := 0
	sem := make(chan struct{}, ownerInspectParallel)
	var wg sync.WaitGroup
	for i, row := range rows {
		if row.State != "" || cannotHear(holders[i]) != "" {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if l, err := a.Listeners(ctx, holders[i]); err == nil && l > 0 {
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return n
}

// ownerAskPage is POST /owners/{owner}/ask: the release-all form, sent
// with its "ask all" button.
func (s *server) ownerAskPage(w http.ResponseWriter, r *http.Request) {
	owner, ok := ownerFromRequest(r)
	if !ok {
		s.fail(w, r, false, http.StatusBadRequest, "bad owner in path")
		return
	}
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
			key, _ = url.PathUnescape(m[2])
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
			formErr = "no lock to ask for: every lock on this page changed or is free"
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
	ctx, cancel := context.WithTimeout(r.Context(), ownerReleaseBudget)
	defer cancel()
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
			results[i] = s.askOwned(ctx, owner, listed, t.key, t.fingerprint, operator, reason)
		})
	}
	wg.Wait()
	var asked, cannot, changed, free, failed int
	for _, row := range results {
		switch row.Outcome {
		case "asked":
			asked++
		case "cannot":
			cannot++
		case "changed":
			changed++
		case "free":
			free++
		default:
			failed++
		}
	}
	v.Results = results
	v.Summary = fmtCount(asked) + " asked, " + fmtCount(cannot) + " skipped (cannot be asked), " + fmtCount(changed) + " skipped (holder changed), " + fmtCount(free) + " skipped (already free)"
	if failed > 0 {
		v.Summary += ", " + plural(failed, "error", "errors")
	}
	v.Summary += "; asked by " + operator + ": " + reason
	s.log.Info("lockscope: release requested of an owner's locks", append(append([]any{"by", operator}, keytext.LogAttrs("owner", owner)...),
		"reason", reason, "asked", asked, "cannot", cannot, "changed", changed, "free", free, "errors", failed)...)
	status := http.StatusOK
	if failed > 0 && failed == len(targets) {
		status = http.StatusBadGateway
	}
	s.render(w, r, status, ownerAskResult(v))
}

// askOwned asks key's holder to release for an ask-all of owner's locks,
// only if it is still the hold the page showed (the release-all's rule:
// listed as owner's, Redis's value names owner, the page's fingerprint)
// and it listens.
func (s *server) askOwned(ctx context.Context, owner string, listed map[string]state.LockInfo, key, fingerprint, operator, reason string) ownerResultRow {
	row := ownerResultRow{Key: newKeyCell(key)}
	if ctx.Err() != nil {
		row.Outcome, row.Text = "error", "error: not attempted: Redis did not answer the keys before it within "+fmtDuration(ownerReleaseBudget)
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
	case cannotHear(h) != "":
		row.Outcome, row.Text = "cannot", "skipped: cannot be asked: another library's lock"
		return row
	}
	if n, err := s.asker().Listeners(ctx, h); err != nil {
		row.Outcome, row.Text = "error", "error: "+err.Error()
		return row
	} else if n == 0 {
		row.Outcome, row.Text = "cannot", "skipped: cannot be asked: the holder does not listen for release requests"
		return row
	}
	out := s.ask(ctx, key, operator, askRequest{Fingerprint: fingerprint, Reason: reason}, 0)
	switch out.kind {
	case "asked":
		row.Outcome, row.Text = "asked", "asked: the holder heard"
	case "unheard":
		row.Outcome, row.Text = "cannot", "asked, but nobody heard it (the holder stopped listening)"
	case "owner-changed":
		row.Outcome, row.Text = "changed", "skipped: the holder changed"
	case "cannot-hear":
		row.Outcome, row.Text = "cannot", "skipped: cannot be asked"
	case "not-held":
		row.Outcome, row.Text = "free", "skipped: already free"
	default:
		row.Outcome, row.Text = "error", "error: "+out.err.Error()
	}
	return row
}

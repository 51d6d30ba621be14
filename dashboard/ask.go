package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/internal/lockjson"
	"github.com/lockscope/lockscope/lock"
)

// Ask before force: GET and POST /keys/{key}/ask (ask.templ) and
// POST /api/v1/locks/{key}/ask ask the holder of a key to release it, the
// polite first move before a forced release. As a release, it quotes the
// fingerprint of the holder the operator saw: a holder that changed in
// between is not asked (409), and nothing is sent to it. The holder hears
// the request if it listens (lock.Lease.ReleaseRequested, Python's
// Lock.listen); one that cannot (another library's lock, a lockscope
// holder that does not listen) is told apart on the key page and refused
// or reported as unheard here, never shown as asked.

// Asker asks holders to release; *lock.Client implements it, and so does
// the Redisson-aware redisson.AnyLockClient the binary passes as the Releaser. The
// dashboard offers asking when its Releaser is one.
type Asker interface {
	// Listeners returns how many connections listen for h's release
	// requests now (0: it cannot hear).
	Listeners(ctx context.Context, h *lock.Holder) (int64, error)
	// RequestRelease asks key's holder to release it, only if its value
	// still has the fingerprint; it returns the holder asked and the
	// listeners reached, or lock.ErrOwnerChanged, lock.ErrNotHeld or
	// lock.ErrCannotHear (nothing sent).
	RequestRelease(ctx context.Context, key, fingerprint string, r lock.ReleaseRequest) (*lock.Holder, int64, error)
}

var _ Asker = (*lock.Client)(nil)

// MaxGrace caps the grace an ask may announce.
const MaxGrace = 24 * time.Hour

// askPath is the ask confirmation and action of key.
func askPath(key string) string { return keyPath(key) + "/ask" }

// asker returns the Releaser as an Asker, nil if it is none.
func (s *server) asker() Asker {
	a, _ := s.rel.(Asker)
	return a
}

// askView is the key page's "Ask to release" control.
type askView struct {
	Href    string // the confirmation; "" when the holder cannot be asked
	Cannot  string // why the holder cannot be asked
	Hearing string // "1 listener"
}

// askViewFor says whether h, Redis's holder of a key now, can be asked.
// nil when the page offers no release either.
func (s *server) askViewFor(ctx context.Context, key string, h *lock.Holder) *askView {
	a := s.asker()
	if a == nil || h == nil || s.readOnly() {
		return nil
	}
	if why := cannotHear(h); why != "" {
		return &askView{Cannot: why}
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	n, err := a.Listeners(ctx, h)
	switch {
	case err != nil:
		return &askView{Cannot: "Redis could not say whether the holder listens: " + err.Error()}
	case n == 0:
		return &askView{Cannot: notListening}
	}
	return &askView{Href: askPath(key), Hearing: plural(int(min(n, math.MaxInt32)), "listener", "listeners")}
}

// notListening says why a lockscope holder without listeners cannot be asked.
const notListening = "The holder cannot be asked: it does not listen for release requests (a lockscope library older than release requests, or code that never calls ReleaseRequested or listen)."

// cannotHear says why h can never hear a request ("" if it might).
func cannotHear(h *lock.Holder) string {
	if h.Foreign || h.Lease == "" {
		short := newOwnerCell(h.Owner).Short
		return "The holder cannot be asked: another library's lock (" + short + ") has no channel to hear a release request on."
	}
	return ""
}

// askRequest is what an ask POST carries (form or JSON).
type askRequest struct {
	Fingerprint  string   `json:"fingerprint"`
	Reason       string   `json:"reason"`
	GraceSeconds *float64 `json:"grace_seconds,omitempty"`
}

func (q *askRequest) validate() (time.Duration, error) {
	rq := releaseRequest{Fingerprint: q.Fingerprint, Reason: q.Reason}
	if err := rq.validate(); err != nil {
		return 0, err
	}
	q.Fingerprint, q.Reason = rq.Fingerprint, rq.Reason
	if q.GraceSeconds == nil {
		return 0, nil
	}
	g := *q.GraceSeconds
	if math.IsNaN(g) || g < 0 || g > MaxGrace.Seconds() {
		return 0, errors.New("grace_seconds must be between 0 and " + strconv.Itoa(int(MaxGrace.Seconds())))
	}
	return time.Duration(g * float64(time.Second)).Round(time.Millisecond), nil
}

// parseGrace reads the form's grace ("30", "30s", "2m"; "" none).
func parseGrace(s string) (*float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return &f, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, errors.New("grace must be seconds or a duration such as 30s or 2m")
	}
	f := d.Seconds()
	return &f, nil
}

// askOutcome is the result of one RequestRelease call.
type askOutcome struct {
	status    int
	kind      string // "asked", "unheard", "owner-changed", "cannot-hear", "not-held", "error"
	holder    *lock.Holder
	listeners int64
	err       error
}

func (s *server) ask(ctx context.Context, key, operator string, req askRequest, grace time.Duration) askOutcome {
	a := s.asker()
	if a == nil {
		return askOutcome{status: http.StatusNotImplemented, kind: "error", err: errors.New("this dashboard cannot ask holders")}
	}
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	h, n, err := a.RequestRelease(ctx, key, req.Fingerprint, lock.ReleaseRequest{Operator: operator, Reason: req.Reason, At: s.now(), Grace: grace})
	attrs := append(append([]any{"by", operator}, keytext.LogAttrs("key", key)...), "reason", req.Reason, "grace", grace)
	switch {
	case err == nil:
		s.log.Info("lockscope: release requested", append(attrs, "lease", h.Lease, "listeners", n)...)
		if n == 0 {
			return askOutcome{status: http.StatusOK, kind: "unheard", holder: h}
		}
		return askOutcome{status: http.StatusOK, kind: "asked", holder: h, listeners: n}
	case errors.Is(err, lock.ErrOwnerChanged):
		return askOutcome{status: http.StatusConflict, kind: "owner-changed", holder: h, err: err}
	case errors.Is(err, lock.ErrCannotHear):
		return askOutcome{status: http.StatusConflict, kind: "cannot-hear", holder: h, err: err}
	case errors.Is(err, lock.ErrNotHeld):
		return askOutcome{status: http.StatusNotFound, kind: "not-held", err: err}
	default:
		s.log.Error("lockscope: release request failed", append(attrs, "err", err)...)
		return askOutcome{status: http.StatusBadGateway, kind: "error", err: err}
	}
}

// askConfirmView is GET /keys/{key}/ask.
type askConfirmView struct {
	Page        page
	Key         keyCell
	Holder      holderView
	Fingerprint string
	Hearing     string
	Action      string
	Reason      string
	Grace       string
	Error       string
	MaxReason   int
	Back        string
	ForceHref   string
}

// askResultView is the outcome page of POST /keys/{key}/ask.
type askResultView struct {
	Page      page
	Key       keyCell
	Outcome   string
	Heading   string
	Message   string
	Holder    *holderView
	By        string
	Reason    string
	Grace     string
	Back      string
	ForceHref string
}

// askConfirmPage shows the holder and asks for a reason and a grace.
func (s *server) askConfirmPage(w http.ResponseWriter, r *http.Request) {
	key, ok := keyFromRequest(r)
	if !ok {
		s.fail(w, r, false, http.StatusBadRequest, "bad key in path")
		return
	}
	s.askConfirm(w, r, key, askRequest{}, "", "", http.StatusOK)
}

func (s *server) askConfirm(w http.ResponseWriter, r *http.Request, key string, req askRequest, grace, formErr string, status int) {
	if s.isSemaphore(r.Context(), key) {
		s.fail(w, r, false, http.StatusConflict, semaphoreNoRelease)
		return
	}
	h, err := s.inspect(r.Context(), key)
	if h == nil {
		if err != nil {
			s.fail(w, r, false, http.StatusBadGateway, "Redis could not be asked who holds the lock: "+err.Error())
			return
		}
		s.fail(w, r, false, http.StatusNotFound, "Nobody to ask: Redis holds no such lock now.")
		return
	}
	av := s.askViewFor(r.Context(), key, h)
	if av == nil || av.Href == "" {
		msg := notListening
		if av != nil {
			msg = av.Cannot
		}
		s.fail(w, r, false, http.StatusConflict, msg+" Force release it if it must go.")
		return
	}
	now := s.now()
	hv := holderFromLock(h, now)
	if d, ok := s.q.Lock(key); ok {
		hv.Waiters = fmtCount(d.Waiters)
		hv.Stuck = d.Stuck
		sinceFromCollector(hv, h, d.LockInfo, now)
	}
	p := s.page(r, "Ask to release", "keys")
	p.Live = false
	s.render(w, r, status, askConfirm(askConfirmView{Page: p, Key: newKeyCell(key), Holder: *hv, Fingerprint: h.Fingerprint,
		Hearing: av.Hearing, Action: askPath(key), Reason: req.Reason, Grace: grace, Error: formErr, MaxReason: MaxReason,
		Back: keyPath(key), ForceHref: releasePath(key)}))
}

// askPage handles the confirmation form's POST.
func (s *server) askPage(w http.ResponseWriter, r *http.Request) {
	key, ok := keyFromRequest(r)
	if !ok {
		s.fail(w, r, false, http.StatusBadRequest, "bad key in path")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, false, http.StatusBadRequest, "bad form: "+err.Error())
		return
	}
	if s.isSemaphore(r.Context(), key) {
		s.fail(w, r, false, http.StatusConflict, semaphoreNoRelease)
		return
	}
	req := askRequest{Fingerprint: r.PostForm.Get("fingerprint"), Reason: r.PostForm.Get("reason")}
	graceText := r.PostForm.Get("grace")
	g, err := parseGrace(graceText)
	var grace time.Duration
	if err == nil {
		req.GraceSeconds = g
		grace, err = req.validate()
	}
	if err != nil {
		s.askConfirm(w, r, key, req, graceText, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	operator := operatorFrom(r.Context())
	out := s.ask(r.Context(), key, operator, req, grace)
	now := s.now()
	p := s.page(r, "Ask to release", "keys")
	p.Live = false
	v := askResultView{Page: p, Key: newKeyCell(key), Outcome: out.kind, Back: keyPath(key), ForceHref: releasePath(key)}
	if out.holder != nil {
		v.Holder = holderFromLock(out.holder, now)
	}
	switch out.kind {
	case "asked":
		v.Heading = "Asked — the holder heard"
		v.Message = "The request reached " + plural(int(min(out.listeners, math.MaxInt32)), "listener", "listeners") + " of this hold. It is the holder's to answer: it may save its work and release, or carry on. The key page shows when the lock is released; the incident history keeps the request and its answer."
		v.By, v.Reason = operator, req.Reason
		if grace > 0 {
			v.Grace = fmtDuration(grace)
		}
	case "unheard":
		v.Heading = "Nobody heard the request"
		v.Message = "The request is on the record, but no connection of this holder listened for it (it stopped listening, or lost its connection to Redis just now). Force release it if it must go."
		v.By, v.Reason = operator, req.Reason
	case "owner-changed":
		v.Heading = "Owner changed — nobody was asked"
		v.Message = "The lock is no longer held by the holder you saw, so nothing was sent: the new holder was not asked. Review it before asking again."
	case "cannot-hear":
		v.Heading = "The holder cannot be asked"
		v.Message = "Another library's lock has no channel to hear a release request on: nothing was sent. Force release it if it must go."
	case "not-held":
		v.Heading = "Not held — nobody to ask"
		v.Message = "The lock was released or expired before you asked."
		v.ForceHref = ""
	default:
		v.Heading = "Asking failed"
		v.Message = "Redis did not answer: " + out.err.Error() + ". The holder may not have been asked; try again."
	}
	s.render(w, r, out.status, askResult(v))
}

type apiAskResult struct {
	Asked        bool             `json:"asked"`
	Heard        bool             `json:"heard"`
	Listeners    int64            `json:"listeners"`
	Outcome      string           `json:"outcome"` // asked, unheard, owner_changed, cannot_hear
	Error        string           `json:"error,omitempty"`
	Key          string           `json:"key"`
	KeyB64       string           `json:"key_b64,omitempty"`
	By           string           `json:"by,omitempty"`
	Reason       string           `json:"reason,omitempty"`
	GraceSeconds float64          `json:"grace_seconds,omitempty"`
	Holder       *lockjson.Holder `json:"holder,omitempty"` // the holder asked, or the holder now when it changed
}

// apiAsk is POST /api/v1/locks/{key}/ask with a JSON body
// {"fingerprint": "...", "reason": "...", "grace_seconds": 30} (or the
// same as a form, grace in "grace").
func (s *server) apiAsk(w http.ResponseWriter, r *http.Request) {
	key, ok := keyFromRequest(r)
	if !ok {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "bad key in path"})
		return
	}
	if s.isSemaphore(r.Context(), key) {
		writeJSON(w, r, http.StatusConflict, apiError{Error: semaphoreNoRelease})
		return
	}
	var req askRequest
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			writeJSON(w, r, http.StatusBadRequest, apiError{Error: "bad JSON body: " + err.Error()})
			return
		}
	case "application/x-www-form-urlencoded", "multipart/form-data":
		if err := r.ParseForm(); err != nil {
			writeJSON(w, r, http.StatusBadRequest, apiError{Error: "bad form: " + err.Error()})
			return
		}
		req = askRequest{Fingerprint: r.PostForm.Get("fingerprint"), Reason: r.PostForm.Get("reason")}
		g, err := parseGrace(r.PostForm.Get("grace"))
		if err != nil {
			writeJSON(w, r, http.StatusUnprocessableEntity, apiError{Error: err.Error()})
			return
		}
		req.GraceSeconds = g
	default:
		writeJSON(w, r, http.StatusUnsupportedMediaType, apiError{Error: "send application/json: {\"fingerprint\": \"...\", \"reason\": \"...\", \"grace_seconds\": 30}"})
		return
	}
	grace, err := req.validate()
	if err != nil {
		writeJSON(w, r, http.StatusUnprocessableEntity, apiError{Error: err.Error()})
		return
	}
	operator := operatorFrom(r.Context())
	out := s.ask(r.Context(), key, operator, req, grace)
	res := apiAskResult{Key: key, KeyB64: keytext.B64IfInvalid(key), Listeners: out.listeners}
	if out.holder != nil {
		res.Holder = holderJSON(out.holder)
	}
	switch out.kind {
	case "asked", "unheard":
		res.Asked, res.Heard, res.Outcome = true, out.kind == "asked", out.kind
		res.By, res.Reason, res.GraceSeconds = operator, req.Reason, grace.Seconds()
		if !res.Heard {
			res.Error = "nobody heard the request: the holder does not listen (it is on the record)"
		}
		writeJSON(w, r, out.status, res)
	case "owner-changed":
		res.Outcome, res.Error = "owner_changed", "owner changed, nobody asked"
		writeJSON(w, r, out.status, res)
	case "cannot-hear":
		res.Outcome, res.Error = "cannot_hear", "the holder cannot hear release requests (another library's lock): nothing sent"
		writeJSON(w, r, out.status, res)
	case "not-held":
		writeJSON(w, r, out.status, apiError{Error: "lock not held, nobody asked"})
	default:
		writeJSON(w, r, out.status, apiError{Error: "ask failed: " + out.err.Error()})
	}
}

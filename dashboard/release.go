package dashboard

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/internal/lockjson"
)

// Forced release, GET and POST /keys/{key}/release (release.templ) and
// POST /api/v1/locks/{key}/release: release what you saw. The confirmation shows the holder
// Redis has now and embeds its value's fingerprint; the POST hands that
// fingerprint to rel.ForceRelease, which deletes the key only if the value
// still matches. A holder that changed in between is never touched.

// MaxReason caps the length in bytes of a forced release's reason.
const MaxReason = 500

// releaseView is the confirmation page, GET /keys/{key}/release.
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

// releaseResultView is the outcome page of POST /keys/{key}/release.
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

// fingerprintRE is a holder's fingerprint: hex sha1 of its value, then for a
// value that cannot tell holder from successor "@" and its expiry (unix ms),
// or "@any" when the operator accepts that it cannot be told.
var fingerprintRE = regexp.MustCompile(`^[0-9a-fA-F]{1,128}(@(-?[0-9]{1,20}|any))?$`)

// releaseRequest is what a release POST carries (form or JSON).
type releaseRequest struct {
	Fingerprint string `json:"fingerprint"`
	Reason      string `json:"reason"`
}

func (q *releaseRequest) validate() error {
	q.Reason = strings.TrimSpace(q.Reason)
	q.Fingerprint = strings.TrimSpace(q.Fingerprint)
	switch {
	case q.Fingerprint == "":
		return errors.New("fingerprint is required: release what you saw")
	case !fingerprintRE.MatchString(q.Fingerprint):
		return errors.New("fingerprint must be the fingerprint shown with the holder (hex, with its @expiry if it has one)")
	}
	return validReason(q.Reason)
}

// validReason checks a forced release's reason (trimmed).
func validReason(reason string) error {
	switch {
	case reason == "":
		return errors.New("a reason is required")
	case len(reason) > MaxReason:
		return errors.New("the reason is longer than " + strconv.Itoa(MaxReason) + " bytes")
	case !utf8.ValidString(reason):
		return errors.New("the reason must be UTF-8 text")
	}
	return nil
}

// releaseConfirmPage shows the holder and asks for a reason.
func (s *server) releaseConfirmPage(w http.ResponseWriter, r *http.Request) {
	key, ok := keyFromRequest(r)
	if !ok {
		s.fail(w, r, false, http.StatusBadRequest, "bad key in path")
		return
	}
	if s.isSemaphore(r.Context(), key) {
		s.fail(w, r, false, http.StatusConflict, semaphoreNoRelease)
		return
	}
	s.confirm(w, r, key, releaseRequest{}, "", http.StatusOK)
}

func (s *server) confirm(w http.ResponseWriter, r *http.Request, key string, req releaseRequest, formErr string, status int) {
	h, err := s.inspect(r.Context(), key)
	if h == nil {
		if err != nil {
			s.fail(w, r, false, http.StatusBadGateway, "Redis could not be asked who holds the lock: "+err.Error())
			return
		}
		s.fail(w, r, false, http.StatusNotFound, "Nothing to release: Redis holds no such lock now.")
		return
	}
	now := s.now()
	hv := holderFromLock(h, now)
	if d, ok := s.q.Lock(key); ok {
		hv.Waiters = fmtCount(d.Waiters)
		hv.Stuck = d.Stuck
		sinceFromCollector(hv, h, d.LockInfo, now)
	}
	// The page is an operator's: a foreign lock's stored value (often the
	// other library's secret token) is shown here and nowhere read-only.
	hv.Value, _ = keytext.Visible(h.Value)
	p := s.page(r, "Force release", "keys")
	p.Live = false
	v := releaseView{
		Page:        p,
		Key:         newKeyCell(key),
		Holder:      *hv,
		Fingerprint: h.Fingerprint,
		Ambiguous:   h.Ambiguous,
		NeedAccept:  h.NeedsAnyHolder(),
		Action:      releasePath(key),
		Reason:      req.Reason,
		Error:       formErr,
		MaxReason:   MaxReason,
		Back:        keyPath(key),
	}
	s.render(w, r, status, releaseConfirm(v))
}

// releasePage handles the confirmation form's POST.
func (s *server) releasePage(w http.ResponseWriter, r *http.Request) {
	key, ok := keyFromRequest(r)
	if !ok {
		s.fail(w, r, false, http.StatusBadRequest, "bad key in path")
		return
	}
	if s.isSemaphore(r.Context(), key) {
		s.fail(w, r, false, http.StatusConflict, semaphoreNoRelease)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, false, http.StatusBadRequest, "bad form: "+err.Error())
		return
	}
	req := releaseRequest{Fingerprint: r.PostForm.Get("fingerprint"), Reason: r.PostForm.Get("reason")}
	if r.PostForm.Get("accept_ambiguous") == "yes" && !strings.Contains(req.Fingerprint, "@") {
		req.Fingerprint += "@any"
	}
	if err := req.validate(); err != nil {
		// Show the confirmation again, with what the operator typed.
		s.confirm(w, r, key, req, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	operator := operatorFrom(r.Context())
	out := s.forceRelease(r.Context(), key, operator, req)
	now := s.now()
	p := s.page(r, "Force release", "keys")
	p.Live = false
	v := releaseResultView{Page: p, Key: newKeyCell(key), Outcome: out.kind, Back: keyPath(key)}
	switch out.kind {
	case "released":
		v.Heading = "Released"
		v.Message = "The lock was deleted. Its holder loses it at its next renewal or use; waiters can now acquire it."
		v.By, v.Reason = operator, req.Reason
		if out.previous != nil {
			v.Previous = holderFromLock(out.previous, now)
			v.Previous.TTL = "" // it has none left: it is gone
		}
	case "owner-changed":
		v.Heading = "Owner changed — nothing touched"
		v.Message = "The lock is no longer held by the holder you confirmed, so it was left alone. Review the current holder before releasing again."
		if out.current != nil {
			v.Current = holderFromLock(out.current, now)
			v.RetryHref = releasePath(key)
		}
	case "ambiguous":
		v.Heading = "Cannot tell this holder from a successor — nothing touched"
		v.Message = "The lock's value is a constant that a newer holder would write alike, and the key has no expiry to tell them apart. Confirm again and tick that you accept releasing whoever holds it now."
		v.RetryHref = releasePath(key)
	case "not-held":
		v.Heading = "Not held — nothing to release"
		v.Message = "The lock was released or expired before you confirmed."
	default:
		v.Heading = "Release failed"
		v.Message = "Redis did not answer: " + out.err.Error() + ". Nothing is known to have changed; try again."
	}
	s.render(w, r, out.status, releaseResult(v))
}

type apiReleaseResult struct {
	Released bool             `json:"released"`
	Error    string           `json:"error,omitempty"`
	Key      string           `json:"key"`
	KeyB64   string           `json:"key_b64,omitempty"`
	By       string           `json:"by,omitempty"`
	Reason   string           `json:"reason,omitempty"`
	Previous *lockjson.Holder `json:"previous,omitempty"` // the holder that was released
	Current  *lockjson.Holder `json:"current,omitempty"`  // the holder now, when the owner changed
}

// apiRelease is POST /api/v1/locks/{key}/release with a JSON body
// {"fingerprint": "...", "reason": "..."} (or the same as a form).
func (s *server) apiRelease(w http.ResponseWriter, r *http.Request) {
	key, ok := keyFromRequest(r)
	if !ok {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "bad key in path"})
		return
	}
	if s.isSemaphore(r.Context(), key) {
		writeJSON(w, r, http.StatusConflict, apiError{Error: semaphoreNoRelease})
		return
	}
	var req releaseRequest
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
		req = releaseRequest{Fingerprint: r.PostForm.Get("fingerprint"), Reason: r.PostForm.Get("reason")}
	default:
		writeJSON(w, r, http.StatusUnsupportedMediaType, apiError{Error: "send application/json: {\"fingerprint\": \"...\", \"reason\": \"...\"}"})
		return
	}
	if err := req.validate(); err != nil {
		writeJSON(w, r, http.StatusUnprocessableEntity, apiError{Error: err.Error()})
		return
	}
	operator := operatorFrom(r.Context())
	out := s.forceRelease(r.Context(), key, operator, req)
	switch out.kind {
	case "released":
		res := apiReleaseResult{Released: true, By: operator, Reason: req.Reason}
		res.Key, res.KeyB64 = key, keytext.B64IfInvalid(key)
		if out.previous != nil {
			res.Previous = holderJSON(out.previous)
		}
		writeJSON(w, r, http.StatusOK, res)
	case "owner-changed":
		res := apiReleaseResult{Error: "owner changed, nothing released"}
		res.Key, res.KeyB64 = key, keytext.B64IfInvalid(key)
		if out.current != nil {
			res.Current = holderJSON(out.current)
		}
		writeJSON(w, r, http.StatusConflict, res)
	case "ambiguous":
		writeJSON(w, r, http.StatusConflict, apiError{Error: "the holder's value is a constant that a successor would write alike and the key has no expiry to tell them apart: nothing released; send the fingerprint followed by \"@any\" to release whoever holds it"})
	case "not-held":
		writeJSON(w, r, http.StatusNotFound, apiError{Error: "lock not held, nothing released"})
	default:
		writeJSON(w, r, out.status, apiError{Error: "release failed: " + out.err.Error()})
	}
}

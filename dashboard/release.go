package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lockscope/lockscope/lock"
)

// Forced release: release what you saw. The confirmation shows the holder
// Redis has now and embeds its value's fingerprint; the POST hands that
// fingerprint to rel.ForceRelease, which deletes the key only if the value
// still matches. A holder that changed in between is never touched.

// releaseTimeout bounds the Redis work of one release request.
const releaseTimeout = 5 * time.Second

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
	case q.Reason == "":
		return errors.New("a reason is required")
	case len(q.Reason) > MaxReason:
		return errors.New("the reason is longer than " + strconv.Itoa(MaxReason) + " bytes")
	case !utf8.ValidString(q.Reason):
		return errors.New("the reason must be UTF-8 text")
	}
	return nil
}

// releaseOutcome is the result of one ForceRelease call.
type releaseOutcome struct {
	status   int
	kind     string       // "released", "owner-changed", "not-held", "error"
	previous *lock.Holder // released holder
	current  *lock.Holder // holder now, after an owner change
	err      error
}

func (s *server) forceRelease(ctx context.Context, key, operator string, req releaseRequest) releaseOutcome {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	prev, err := s.rel.ForceRelease(ctx, key, req.Fingerprint, operator, req.Reason)
	switch {
	case err == nil:
		attrs := []any{"by", operator, "key", key, "reason", req.Reason}
		if prev != nil {
			attrs = append(attrs, "owner", prev.Owner, "lease", prev.Lease, "fence", prev.Fence)
			if !prev.Since.IsZero() {
				attrs = append(attrs, "held", s.now().Sub(prev.Since).Round(time.Millisecond))
			}
		}
		s.log.Info("lockscope: forced release", attrs...)
		return releaseOutcome{status: http.StatusOK, kind: "released", previous: prev}
	case errors.Is(err, lock.ErrOwnerChanged):
		s.log.Warn("lockscope: forced release refused, owner changed", "by", operator, "key", key, "fingerprint", req.Fingerprint)
		cur := prev // ForceRelease answers the holder it found instead
		if cur == nil {
			cur, _ = s.inspect(ctx, key)
		}
		return releaseOutcome{status: http.StatusConflict, kind: "owner-changed", current: cur, err: err}
	case errors.Is(err, lock.ErrAmbiguous):
		return releaseOutcome{status: http.StatusConflict, kind: "ambiguous", current: prev, err: err}
	case errors.Is(err, lock.ErrNotHeld):
		return releaseOutcome{status: http.StatusNotFound, kind: "not-held", err: err}
	default:
		s.log.Error("lockscope: forced release failed", "by", operator, "key", key, "err", err)
		return releaseOutcome{status: http.StatusBadGateway, kind: "error", err: err}
	}
}

// releaseConfirmPage shows the holder and asks for a reason.
func (s *server) releaseConfirmPage(w http.ResponseWriter, r *http.Request) {
	key, ok := keyFromRequest(r)
	if !ok {
		s.fail(w, r, false, http.StatusBadRequest, "bad key in path")
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
	hv.Value, _ = displayKey(h.Value)
	p := s.page(r, "Force release", "keys")
	p.Live = false
	v := releaseView{
		Page:        p,
		Key:         newKeyCell(key),
		Holder:      *hv,
		Fingerprint: h.Fingerprint,
		Ambiguous:   h.Ambiguous,
		NeedAccept:  h.Ambiguous && !strings.Contains(h.Fingerprint, "@"),
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

// apiRelease is POST /api/v1/locks/{key}/release with a JSON body
// {"fingerprint": "...", "reason": "..."} (or the same as a form).
func (s *server) apiRelease(w http.ResponseWriter, r *http.Request) {
	key, ok := keyFromRequest(r)
	if !ok {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "bad key in path"})
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
		res.Key, res.KeyB64 = key, b64IfInvalid(key)
		if out.previous != nil {
			res.Previous = newAPIHolder(out.previous)
		}
		writeJSON(w, r, http.StatusOK, res)
	case "owner-changed":
		res := apiReleaseResult{Error: "owner changed, nothing released"}
		res.Key, res.KeyB64 = key, b64IfInvalid(key)
		if out.current != nil {
			res.Current = newAPIHolder(out.current)
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

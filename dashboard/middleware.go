package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/a-h/templ"
)

type ctxKey int

const (
	nonceKey ctxKey = iota
	operatorKey
)

// secure sets the security headers of every response and gives each request
// a fresh CSP nonce (in the context, for the page's one script tag).
func (s *server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b [18]byte
		rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
		nonce := base64.RawURLEncoding.EncodeToString(b[:])
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+nonce+"'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		ctx := context.WithValue(r.Context(), nonceKey, nonce)
		ctx = templ.WithNonce(ctx, nonce)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func nonceFrom(ctx context.Context) string {
	n, _ := ctx.Value(nonceKey).(string)
	return n
}

func operatorFrom(ctx context.Context) string {
	o, _ := ctx.Value(operatorKey).(string)
	return o
}

// authResult is what a request's credentials amount to.
type authResult int

const (
	authNone authResult = iota // no credentials offered
	authBad                    // credentials offered and wrong
	authGood                   // an operator
)

// authenticate checks the request's Authorization header against the
// configured credentials in constant time and names the operator.
func (s *server) authenticate(r *http.Request) (authResult, string) {
	hdr := r.Header.Get("Authorization")
	if hdr == "" {
		return authNone, ""
	}
	if s.opt.Token != "" || len(s.opt.Tokens) > 0 {
		if tok, ok := strings.CutPrefix(hdr, "Bearer "); ok {
			tok = strings.TrimSpace(tok)
			who := ""
			if s.opt.Token != "" && secretEqual(tok, s.opt.Token) {
				who = s.opt.TokenOperator
			}
			// Compare with every named token: no early exit.
			for name, want := range s.opt.Tokens {
				if secretEqual(tok, want) {
					who = name
				}
			}
			if who != "" {
				return authGood, who
			}
			return authBad, ""
		}
	}
	if s.opt.Username != "" {
		if user, pass, ok := r.BasicAuth(); ok {
			// Evaluate both comparisons: no early exit on the user name.
			u := secretEqual(user, s.opt.Username)
			p := secretEqual(pass, s.opt.Password)
			if u && p {
				return authGood, user
			}
		}
	}
	return authBad, ""
}

// triedUser is the user name a failed request offered, for the log.
func triedUser(r *http.Request) string {
	if user, _, ok := r.BasicAuth(); ok {
		return user
	}
	if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		return "(bearer token)"
	}
	return "(unknown scheme)"
}

// secretEqual compares in constant time. Hashing first makes the time
// independent of the lengths too, which subtle.ConstantTimeCompare is not.
func secretEqual(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// challenge asks for credentials: a browser shows its login prompt for Basic.
func (s *server) challenge(w http.ResponseWriter) {
	if s.opt.Username != "" {
		w.Header().Add("WWW-Authenticate", `Basic realm="lockscope", charset="UTF-8"`)
	}
	if s.opt.Token != "" || len(s.opt.Tokens) > 0 {
		w.Header().Add("WWW-Authenticate", `Bearer realm="lockscope"`)
	}
}

// reader guards pages: open unless RequireAuthForRead; valid credentials, if
// offered, name the operator on the page either way.
func (s *server) reader(h http.HandlerFunc) http.Handler {
	return s.guard(h, false, false)
}

// apiReader guards the GET API like reader, answering errors in JSON.
func (s *server) apiReader(h http.HandlerFunc) http.Handler {
	return s.guard(h, false, true)
}

// operator guards state changes (and the release confirmation): refused in
// read-only mode, else operator credentials required.
func (s *server) operator(h http.HandlerFunc, api bool) http.Handler {
	return s.guard(h, true, api)
}

func (s *server) guard(h http.HandlerFunc, write, api bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if write && s.readOnly() {
			s.fail(w, r, api, http.StatusForbidden, "read-only dashboard: no operator credentials are configured, releases are disabled")
			return
		}
		if r.Header.Get("Authorization") != "" {
			if left, ok := s.auth.blocked(source(r)); ok {
				s.tooMany(w, r, api, left)
				return
			}
		}
		res, who := s.authenticate(r)
		if res == authBad {
			s.auth.failed(source(r), triedUser(r), r.URL.Path)
		}
		need := write || s.opt.RequireAuthForRead
		switch {
		case res == authGood:
			r = r.WithContext(context.WithValue(r.Context(), operatorKey, who))
		case need && res == authBad:
			s.challenge(w)
			s.fail(w, r, api, http.StatusUnauthorized, "wrong credentials")
			return
		case need:
			s.challenge(w)
			s.fail(w, r, api, http.StatusUnauthorized, "operator credentials required")
			return
		}
		h(w, r)
	})
}

func (s *server) crossOriginDenied(w http.ResponseWriter, r *http.Request) {
	api := strings.HasPrefix(r.URL.Path, "/api/")
	s.fail(w, r, api, http.StatusForbidden, "cross-origin request refused: state changes must come from this dashboard's own pages")
}

func (s *server) notFound(w http.ResponseWriter, r *http.Request) {
	s.fail(w, r, strings.HasPrefix(r.URL.Path, "/api/"), http.StatusNotFound, "no such page")
}

func (s *server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	s.fail(w, r, strings.HasPrefix(r.URL.Path, "/api/"), http.StatusMethodNotAllowed, "method not allowed")
}

package dashboard

import (
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/lockscope/lockscope/internal/keytext"
)

// Failed authentications. Each is counted (Options.AuthFailures) and logged
// with its source and the user name tried, at most one line per source per
// window and authLogBurst lines a second overall. A source with more than
// authMaxFailures failures in a window is refused, credentials and all, with
// 429 and Retry-After until its window ends: a password cannot be guessed
// faster than that. Requests without credentials are never refused (reading
// stays open when it is). The source is the peer address: behind a reverse
// proxy every client shares the proxy's, so a guesser blocks operators'
// logins through it for the window, and nobody guesses faster.
const (
	authWindow      = time.Minute
	authMaxFailures = 10
	authMaxSources  = 10_000 // sources tracked at once; the oldest windows go first
	authLogBurst    = 10
)

type authSource struct {
	start    time.Time // window start
	failures int
	logged   bool // a line was logged in this window
}

type authLimiter struct {
	mu      sync.Mutex
	now     func() time.Time
	log     *slog.Logger
	count   func()
	sources map[string]*authSource
	logSec  int64 // unix second of the last log lines
	logN    int   // lines logged in that second
}

func newAuthLimiter(now func() time.Time, log *slog.Logger, count func()) *authLimiter {
	return &authLimiter{now: now, log: log, count: count, sources: make(map[string]*authSource)}
}

// source is the request's peer address without the port.
func source(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// blocked reports whether src is refused now and for how long.
func (l *authLimiter) blocked(src string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sources[src]
	if s == nil || s.failures <= authMaxFailures {
		return 0, false
	}
	left := s.start.Add(authWindow).Sub(l.now())
	if left <= 0 {
		delete(l.sources, src)
		return 0, false
	}
	return left, true
}

// failed records a failed authentication from src trying user.
func (l *authLimiter) failed(src, user, path string) {
	if l.count != nil {
		l.count()
	}
	now := l.now()
	l.mu.Lock()
	s := l.sources[src]
	if s == nil || now.Sub(s.start) >= authWindow {
		if s == nil && len(l.sources) >= authMaxSources {
			l.pruneLocked(now)
		}
		s = &authSource{start: now}
		l.sources[src] = s
	}
	s.failures++
	n := s.failures
	logIt := !s.logged || n == authMaxFailures+1
	s.logged = true
	if logIt {
		if sec := now.Unix(); sec != l.logSec {
			l.logSec, l.logN = sec, 0
		}
		l.logN++
		logIt = l.logN <= authLogBurst
	}
	l.mu.Unlock()
	if !logIt {
		return
	}
	u, _ := keytext.Visible(user)
	if n > authMaxFailures {
		l.log.Warn("lockscope: failed authentications; refusing this source's credentials until its window ends",
			"source", src, "user", keytext.Cut(u, 64), "failures", n, "window", authWindow, "path", path)
		return
	}
	l.log.Warn("lockscope: failed authentication (further failures from this source in this minute are counted, not logged)",
		"source", src, "user", keytext.Cut(u, 64), "path", path)
}

// pruneLocked drops ended windows, or else the oldest half.
func (l *authLimiter) pruneLocked(now time.Time) {
	for k, s := range l.sources {
		if now.Sub(s.start) >= authWindow {
			delete(l.sources, k)
		}
	}
	if len(l.sources) < authMaxSources {
		return
	}
	var oldest time.Time
	for _, s := range l.sources {
		if oldest.IsZero() || s.start.Before(oldest) {
			oldest = s.start
		}
	}
	cut := oldest.Add(now.Sub(oldest) / 2)
	for k, s := range l.sources {
		if !s.start.After(cut) {
			delete(l.sources, k)
		}
	}
}

// tooMany answers a refused source.
func (s *server) tooMany(w http.ResponseWriter, r *http.Request, api bool, left time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int((left+time.Second-1)/time.Second)))
	s.fail(w, r, api, http.StatusTooManyRequests, "too many failed authentications from your address: try again later")
}

package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/mux"
)

// Options configures the dashboard. The zero value is a read-only dashboard
// open for reading.
type Options struct {
	// Username and Password enable HTTP basic auth for operators. Both or
	// neither must be set. The user name is recorded as who released a lock.
	Username, Password string
	// Token enables "Authorization: Bearer <Token>" for operators (scripts,
	// the command line). "" disables it.
	Token string
	// TokenOperator is recorded as who released a lock with Token; "" means "token".
	TokenOperator string
	// Tokens are named bearer tokens (name → token): a release made with
	// one is recorded as by its name, so the audit says who.
	Tokens map[string]string
	// RequireAuthForRead makes pages and the GET API need operator
	// credentials too. Default false: reading is open.
	RequireAuthForRead bool
	// Metrics, if set, is served at /metrics without credentials.
	Metrics http.Handler
	// AllowedHosts are the names a request's Host header may carry
	// ("locks.example.com", "*.example.com" for its subdomains, "*" for
	// any); other names are refused with 421, so a DNS-rebinding page
	// cannot read the dashboard through the victim's browser. IP literals
	// are always allowed: rebinding needs a name. Empty: no check (the
	// binary always sets it; see DefaultAllowedHosts).
	AllowedHosts []string
	// TrustedOrigins are origins ("https://locks.example.com") allowed to POST
	// besides the request's own host, for reverse proxies that rewrite Host.
	TrustedOrigins []string
	// Ping, if set, asks Redis whether it answers; /readyz turns 503 when it
	// errs or takes longer than ReadyTimeout (a stalled Redis sends no
	// error: only silence).
	Ping func(context.Context) error
	// ReadyTimeout bounds Ping in /readyz; 0 means one second.
	ReadyTimeout time.Duration
	// AuthFailures, if set, is called once per failed authentication
	// (lockscope_auth_failures_total).
	AuthFailures func()
	// Logger receives the audit log of forced releases; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock for "held for" and "ago"; nil means time.Now.
	Now func() time.Time
	// HotKeys is how many hot keys the overview lists; 0 means 12.
	HotKeys int
	// PageSize is the keys page's rows per page; 0 means 50.
	PageSize int
	// TraceURL turns the trace ids shown on the key page and on /blocking
	// into links: an http or https URL in which {trace_id} is replaced by
	// the id's 32 hex digits (https://tempo.example.com/trace/{trace_id}).
	// "" shows the ids as text.
	TraceURL string
	// Incidents, if set, is the incident history GET /incidents and
	// /api/v1/incidents list (the collector's IncidentStore). nil: the
	// dashboard keeps none.
	Incidents IncidentLister
	// Semaphore, if set, reads a key as a Redisson semaphore (nil when it
	// is none): its key page and /api/v1/locks/{key} show its permits,
	// live from Redis, though no event names the key. serve sets it for
	// the keys of its "PATTERN=semaphore" watch rules.
	Semaphore SemaphoreReader
	// ReleaseAllBudget bounds the Redis work of one release-all POST of
	// an owner page: keys not reached within it are reported "not
	// attempted". 0 means 30 s.
	ReleaseAllBudget time.Duration
}

// server holds what handlers share.
type server struct {
	q     Querier
	rel   Releaser
	opt   Options
	log   *slog.Logger
	now   func() time.Time
	hosts *hostCheck
	auth  *authLimiter
}

// New returns the dashboard's handler. rel may be nil: the dashboard is then
// read-only whatever the credentials.
func New(q Querier, rel Releaser, opt *Options) (http.Handler, error) {
	if q == nil {
		return nil, errors.New("dashboard: nil Querier")
	}
	s := &server{q: newSharedQuerier(q, time.Now), rel: rel}
	if opt != nil {
		s.opt = *opt
	}
	if (s.opt.Username == "") != (s.opt.Password == "") {
		return nil, errors.New("dashboard: Username and Password must be set together")
	}
	if s.opt.RequireAuthForRead && !s.hasCredentials() {
		return nil, errors.New("dashboard: RequireAuthForRead needs Username/Password or Token")
	}
	s.log = s.opt.Logger
	if s.log == nil {
		s.log = slog.Default()
	}
	s.now = s.opt.Now
	if s.now == nil {
		s.now = time.Now
	}
	if s.opt.TokenOperator == "" {
		s.opt.TokenOperator = "token"
	}
	if s.opt.HotKeys <= 0 {
		s.opt.HotKeys = 12
	}
	if s.opt.PageSize <= 0 {
		s.opt.PageSize = 50
	}
	if s.opt.TraceURL != "" {
		if err := CheckTraceURL(s.opt.TraceURL); err != nil {
			return nil, fmt.Errorf("dashboard: %w", err)
		}
	}

	cop := http.NewCrossOriginProtection()
	for _, o := range s.opt.TrustedOrigins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			return nil, err
		}
	}
	cop.SetDenyHandler(http.HandlerFunc(s.crossOriginDenied))

	s.auth = newAuthLimiter(s.now, s.log, s.opt.AuthFailures)
	hosts, err := newHostCheck(s.opt.AllowedHosts)
	if err != nil {
		return nil, err
	}
	s.hosts = hosts
	return s.secure(s.checkHost(cop.Handler(s.routes()))), nil
}

// readOnly reports whether releases are impossible by configuration.
func (s *server) readOnly() bool { return s.rel == nil || !s.hasCredentials() }

func (s *server) hasCredentials() bool {
	return s.opt.Username != "" || s.opt.Token != "" || len(s.opt.Tokens) > 0
}

func (s *server) routes() *mux.Router {
	r := mux.NewRouter()
	// Keys are escaped into one path segment; match on the escaped path so
	// an escaped '/' stays inside {key}.
	r.UseEncodedPath()
	r.SkipClean(true)
	r.NotFoundHandler = http.HandlerFunc(s.notFound)
	r.MethodNotAllowedHandler = http.HandlerFunc(s.methodNotAllowed)

	r.HandleFunc("/healthz", s.healthz).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/readyz", s.readyz).Methods(http.MethodGet, http.MethodHead)
	if s.opt.Metrics != nil {
		r.Handle("/metrics", s.opt.Metrics).Methods(http.MethodGet, http.MethodHead)
	}
	r.PathPrefix("/static/").Handler(staticHandler()).Methods(http.MethodGet, http.MethodHead)

	read := func(h http.HandlerFunc) http.Handler { return s.reader(h) }
	r.Handle("/", read(s.overviewPage)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/keys", read(s.keysPage)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/keys/{key}", read(s.keyPage)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/blocking", read(s.blockingPage)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/incidents", read(s.incidentsPage)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/owners/{owner}", read(s.ownerPage)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/owners/{owner}/release", s.operator(s.ownerReleasePage, false)).Methods(http.MethodPost)
	// GET shows the confirmation (operators only), POST releases.
	r.Handle("/keys/{key}/release", s.operator(s.releaseConfirmPage, false)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/keys/{key}/release", s.operator(s.releasePage, false)).Methods(http.MethodPost)
	r.Handle("/keys/{key}/ask", s.operator(s.askConfirmPage, false)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/keys/{key}/ask", s.operator(s.askPage, false)).Methods(http.MethodPost)
	r.Handle("/owners/{owner}/ask", s.operator(s.ownerAskPage, false)).Methods(http.MethodPost)
	r.Handle("/api/v1/locks/{key}/ask", s.operator(s.apiAsk, true)).Methods(http.MethodPost)

	r.Handle("/api/v1/overview", s.apiReader(s.apiOverview)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/api/v1/hotkeys", s.apiReader(s.apiHotKeys)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/api/v1/locks", s.apiReader(s.apiLocks)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/api/v1/locks/{key}", s.apiReader(s.apiLock)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/api/v1/locks/{key}/release", s.operator(s.apiRelease, true)).Methods(http.MethodPost)
	r.Handle("/api/v1/blocking", s.apiReader(s.apiBlocking)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/api/v1/incidents", s.apiReader(s.apiIncidentsList)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/api/v1/owners/{owner}", s.apiReader(s.apiOwnerLocks)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/api/v1/lockorder", s.apiReader(s.apiLockOrder)).Methods(http.MethodGet, http.MethodHead)

	r.Handle("/classes", read(s.classesPage)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/classes/{class}", read(s.classPage)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/api/v1/classes", s.apiReader(s.apiClassesList)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/api/v1/advice", s.apiReader(s.apiAdvice)).Methods(http.MethodGet, http.MethodHead)
	return r
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var why string
	if err := s.q.Health(); err != nil {
		why = err.Error()
	} else if s.opt.Ping != nil {
		d := s.opt.ReadyTimeout
		if d <= 0 {
			d = time.Second
		}
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		// The client may not bound its read by ctx (go-redis without
		// ContextTimeoutEnabled waits its ReadTimeout): wait for ctx only.
		done := make(chan error, 1)
		go func() { done <- s.opt.Ping(ctx) }()
		select {
		case perr := <-done:
			if perr != nil {
				why = "Redis: " + perr.Error()
			}
		case <-ctx.Done():
			why = fmt.Sprintf("Redis did not answer within %v", d)
		}
	}
	if why != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("not ready: " + why + "\n"))
		return
	}
	w.Write([]byte("ok\n"))
}

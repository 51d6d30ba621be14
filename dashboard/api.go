package dashboard

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/lock"
)

// The JSON API mirrors the pages. Conventions:
//   - durations are seconds as floats ("wait_p99_seconds"), times RFC 3339
//     with nanoseconds in UTC, omitted when unknown;
//   - keys and owners are strings; when one is not valid UTF-8 its exact
//     bytes are also sent base64-encoded in "<field>_b64" (see b64IfInvalid);
//   - errors are {"error": "..."} with a 4xx/5xx status.

type apiError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true) // a key like "</script>" stays inert if pasted into a page
	enc.Encode(v)
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

type apiOverview struct {
	At               *time.Time `json:"at,omitempty"`
	AcquireRate      float64    `json:"acquire_rate"`
	ContentionRatio  float64    `json:"contention_ratio"`
	WaitP99          float64    `json:"wait_p99_seconds"`
	HoldP99          float64    `json:"hold_p99_seconds"`
	Held             int        `json:"held"`
	Waiters          int        `json:"waiters"`
	Stuck            int        `json:"stuck"`
	Expirations5m    int64      `json:"expirations_5m"`
	Forced5m         int64      `json:"forced_5m"`
	Failures5m       int64      `json:"failures_5m"`
	EventsTotal      int64      `json:"events_total"`
	Malformed        int64      `json:"malformed"`
	Dropped          int64      `json:"dropped"`
	LastEvent        *time.Time `json:"last_event,omitempty"`
	TrackedKeys      int        `json:"tracked_keys"`
	SeriesStep       float64    `json:"series_step_seconds"`
	AcquireSeries    []float64  `json:"acquire_series"`
	ContentionSeries []float64  `json:"contention_series"`
	ReadOnly         bool       `json:"read_only"`
	Ingesting        bool       `json:"ingesting"`
	IngestError      string     `json:"ingest_error,omitempty"`
}

func (s *server) apiOverview(w http.ResponseWriter, r *http.Request) {
	o := s.q.Overview()
	v := apiOverview{
		At: timeOrNil(o.At), AcquireRate: o.AcquireRate, ContentionRatio: o.ContentionRatio,
		WaitP99: seconds(o.WaitP99), HoldP99: seconds(o.HoldP99),
		Held: o.Held, Waiters: o.Waiters, Stuck: o.Stuck,
		Expirations5m: o.Expirations5m, Forced5m: o.Forced5m, Failures5m: o.Failures5m,
		EventsTotal: o.EventsTotal, Malformed: o.Malformed, Dropped: o.Dropped,
		LastEvent: timeOrNil(o.LastEvent), TrackedKeys: o.TrackedKeys,
		SeriesStep: seconds(o.SeriesStep), AcquireSeries: nonNil(o.AcquireSeries), ContentionSeries: nonNil(o.ContentionSeries),
		ReadOnly: s.readOnly(), Ingesting: true,
	}
	if err := s.q.Health(); err != nil {
		v.Ingesting, v.IngestError = false, err.Error()
	}
	writeJSON(w, r, http.StatusOK, v)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

type apiHotKey struct {
	Key          string  `json:"key"`
	KeyB64       string  `json:"key_b64,omitempty"`
	Class        string  `json:"class"`
	Contentions  int64   `json:"contentions"`
	Wait         float64 `json:"wait_seconds"`
	Acquisitions int64   `json:"acquisitions"`
	Error        int64   `json:"error"`
	Href         string  `json:"href"`
}

type apiHotKeys struct {
	Window string      `json:"window"`
	By     string      `json:"by"`
	Keys   []apiHotKey `json:"keys"`
}

// apiHotKeys is GET /api/v1/hotkeys?window=5m&by=contentions&n=10.
func (s *server) apiHotKeys(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	window, ok := parseWindow(qs.Get("window"))
	if !ok {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "window must be one of 1m, 5m, 1h"})
		return
	}
	by, ok := parseRanking(qs.Get("by"))
	if !ok {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "by must be contentions or wait"})
		return
	}
	n, ok := atoiDefault(qs.Get("n"), 10, 1, 100)
	if !ok {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "n must be 1..100"})
		return
	}
	v := apiHotKeys{Window: windowLabel(window), By: string(by), Keys: []apiHotKey{}}
	for _, h := range s.q.HotKeys(window, by, n) {
		v.Keys = append(v.Keys, apiHotKey{
			Key: h.Key, KeyB64: b64IfInvalid(h.Key), Class: h.Class, Contentions: h.Contentions,
			Wait: seconds(h.Wait), Acquisitions: h.Acquisitions, Error: h.Error, Href: apiLockPath(h.Key),
		})
	}
	writeJSON(w, r, http.StatusOK, v)
}

type apiLockInfo struct {
	Key          string     `json:"key"`
	KeyB64       string     `json:"key_b64,omitempty"`
	Class        string     `json:"class"`
	Held         bool       `json:"held"`
	Owner        string     `json:"owner,omitempty"`
	OwnerB64     string     `json:"owner_b64,omitempty"`
	Lease        string     `json:"lease,omitempty"`
	Since        *time.Time `json:"since,omitempty"`
	HeldFor      float64    `json:"held_for_seconds"`
	TTL          float64    `json:"ttl_seconds"` // -1: no expiry
	NoExpiry     bool       `json:"no_expiry,omitempty"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"`
	Fence        int64      `json:"fence,omitempty"`
	Waiters      int        `json:"waiters"`
	Stuck        bool       `json:"stuck"`
	Degraded     bool       `json:"degraded,omitempty"`
	Passive      bool       `json:"passive,omitempty"`
	Acquisitions int64      `json:"acquisitions"`
	Contentions  int64      `json:"contentions"`
	Failures     int64      `json:"failures"`
	WaitTotal    float64    `json:"wait_total_seconds"`
	HoldTotal    float64    `json:"hold_total_seconds"`
	LastEvent    *time.Time `json:"last_event,omitempty"`
	Href         string     `json:"href"`
}

func newAPILockInfo(l state.LockInfo, now time.Time) apiLockInfo {
	i := apiLockInfo{
		Key: l.Key, KeyB64: b64IfInvalid(l.Key), Class: l.Class, Held: l.Held,
		Owner: l.Owner, OwnerB64: b64IfInvalid(l.Owner), Lease: l.Lease,
		Since: timeOrNil(l.Since), HeldFor: seconds(l.HeldFor(now)), TTL: seconds(l.TTL), ExpiresAt: timeOrNil(l.ExpiresAt),
		Fence: l.Fence, Waiters: l.Waiters, Stuck: l.Stuck, Degraded: l.Degraded, Passive: l.Passive, NoExpiry: l.NoExpiry(),
		Acquisitions: l.Acquisitions, Contentions: l.Contentions, Failures: l.Failures,
		WaitTotal: seconds(l.WaitTotal), HoldTotal: seconds(l.HoldTotal), LastEvent: timeOrNil(l.LastEvent),
		Href: apiLockPath(l.Key),
	}
	if i.NoExpiry {
		i.TTL = -1
	}
	return i
}

type apiLockPage struct {
	Total  int           `json:"total"`
	Offset int           `json:"offset"`
	Limit  int           `json:"limit"`
	Locks  []apiLockInfo `json:"locks"`
}

// apiLocks is GET /api/v1/locks?q=&class=&held=1&sort=contentions&order=desc&offset=0&limit=50.
func (s *server) apiLocks(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	lq, err := lockQuery(qs, state.SortContentions)
	if err != nil {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	var ok1, ok2 bool
	lq.Offset, ok1 = atoiDefault(qs.Get("offset"), 0, 0, 1<<30)
	lq.Limit, ok2 = atoiDefault(qs.Get("limit"), 50, 1, 500)
	if !ok1 || !ok2 {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "offset must be >= 0 and limit 1..500"})
		return
	}
	now := s.now()
	res := s.q.Locks(lq)
	v := apiLockPage{Total: res.Total, Offset: lq.Offset, Limit: lq.Limit, Locks: make([]apiLockInfo, 0, len(res.Locks))}
	for _, l := range res.Locks {
		v.Locks = append(v.Locks, newAPILockInfo(l, now))
	}
	writeJSON(w, r, http.StatusOK, v)
}

type apiDistribution struct {
	Bounds []float64 `json:"bounds_seconds"`
	Counts []int64   `json:"counts"`
	Sum    float64   `json:"sum_seconds"`
	Count  int64     `json:"count"`
}

func newAPIDistribution(d state.Distribution) apiDistribution {
	v := apiDistribution{Bounds: make([]float64, len(d.Bounds)), Counts: nonNil(d.Counts), Sum: seconds(d.Sum), Count: d.Count}
	for i, b := range d.Bounds {
		v.Bounds[i] = seconds(b)
	}
	return v
}

type apiEvent struct {
	Type      string    `json:"type"`
	Owner     string    `json:"owner,omitempty"`
	OwnerB64  string    `json:"owner_b64,omitempty"`
	Lease     string    `json:"lease,omitempty"`
	At        time.Time `json:"at"`
	Wait      float64   `json:"wait_seconds,omitempty"`
	Hold      float64   `json:"hold_seconds,omitempty"`
	TTL       float64   `json:"ttl_seconds,omitempty"`
	Attempts  int       `json:"attempts,omitempty"`
	Fence     int64     `json:"fence,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Holder    string    `json:"holder,omitempty"`
	HolderB64 string    `json:"holder_b64,omitempty"`
	By        string    `json:"by,omitempty"`
	ByB64     string    `json:"by_b64,omitempty"`
	Degraded  bool      `json:"degraded,omitempty"`
	Passive   bool      `json:"passive,omitempty"`
}

type apiHolder struct {
	Owner       string     `json:"owner"`
	OwnerB64    string     `json:"owner_b64,omitempty"`
	Lease       string     `json:"lease,omitempty"`
	Fence       int64      `json:"fence,omitempty"`
	TTL         float64    `json:"ttl_seconds"` // -1: no expiry
	NoExpiry    bool       `json:"no_expiry,omitempty"`
	Since       *time.Time `json:"since,omitempty"`
	Fingerprint string     `json:"fingerprint"`
	Foreign     bool       `json:"foreign,omitempty"`
	Degraded    bool       `json:"degraded,omitempty"`
	Value       *string    `json:"value,omitempty"` // a foreign lock's raw value: only with ?reveal=value, to operators
	ValueB64    string     `json:"value_b64,omitempty"`
}

func newAPIHolder(h *lock.Holder) *apiHolder {
	a := &apiHolder{
		Owner: h.Owner, OwnerB64: b64IfInvalid(h.Owner), Lease: h.Lease, Fence: h.Fence, TTL: seconds(h.TTL),
		Since: timeOrNil(h.Since), Fingerprint: h.Fingerprint, Foreign: h.Foreign, Degraded: h.Degraded,
	}
	if h.TTL < 0 { // no expiry: -1, not the -1ns the TTL carries
		a.TTL, a.NoExpiry = -1, true
	}
	return a
}

type apiLockDetail struct {
	apiLockInfo
	Tracked       bool            `json:"tracked"`
	Redis         *apiHolder      `json:"redis_holder"` // null: not held in Redis (or no lock client)
	RedisError    string          `json:"redis_error,omitempty"`
	Wait          apiDistribution `json:"wait"`
	Hold          apiDistribution `json:"hold"`
	SeriesStep    float64         `json:"series_step_seconds"`
	AcquireSeries []float64       `json:"acquire_series"`
	Recent        []apiEvent      `json:"recent"`
	WaitersNow    []apiWaiter     `json:"waiters_now"` // callers waiting for the key now, oldest first
}

type apiReleaseResult struct {
	Released bool       `json:"released"`
	Error    string     `json:"error,omitempty"`
	Key      string     `json:"key"`
	KeyB64   string     `json:"key_b64,omitempty"`
	By       string     `json:"by,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	Previous *apiHolder `json:"previous,omitempty"` // the holder that was released
	Current  *apiHolder `json:"current,omitempty"`  // the holder now, when the owner changed
}

// apiLock is GET /api/v1/locks/{key}: the collector's view plus Redis's
// current holder, whose fingerprint a release must quote.
func (s *server) apiLock(w http.ResponseWriter, r *http.Request) {
	key, ok := keyFromRequest(r)
	if !ok {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "bad key in path"})
		return
	}
	reveal := r.URL.Query().Get("reveal")
	switch {
	case reveal != "" && reveal != "value":
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "reveal takes one value: reveal=value"})
		return
	case reveal != "" && s.readOnly():
		writeJSON(w, r, http.StatusForbidden, apiError{Error: "read-only dashboard: lock values are shown to operators only, and none are configured"})
		return
	case reveal != "" && operatorFrom(r.Context()) == "":
		s.challenge(w)
		writeJSON(w, r, http.StatusUnauthorized, apiError{Error: "operator credentials required to reveal a lock's value"})
		return
	}
	d, known := s.q.Lock(key)
	h, ierr := s.inspect(r.Context(), key)
	if !known && h == nil {
		writeJSON(w, r, http.StatusNotFound, apiError{Error: "unknown key: no events seen and not held in Redis"})
		return
	}
	if !known {
		d.Key = key
	}
	now := s.now()
	v := apiLockDetail{
		apiLockInfo: newAPILockInfo(d.LockInfo, now), Tracked: known,
		Wait: newAPIDistribution(d.Wait), Hold: newAPIDistribution(d.Hold),
		SeriesStep: seconds(d.SeriesStep), AcquireSeries: nonNil(d.AcquireSeries), Recent: make([]apiEvent, 0, len(d.Recent)),
		WaitersNow: make([]apiWaiter, 0, len(d.WaitersNow)),
	}
	for _, x := range d.WaitersNow {
		v.WaitersNow = append(v.WaitersNow, newAPIWaiter(x, now))
	}
	if h != nil {
		v.Redis = newAPIHolder(h)
		if v.Redis.Since == nil && d.Held && d.Owner == h.Owner && !d.Since.IsZero() {
			v.Redis.Since = timeOrNil(d.Since) // a foreign value carries none: when the collector saw it taken
		}
		if reveal != "" && h.Foreign {
			v.Redis.Value, v.Redis.ValueB64 = &h.Value, b64IfInvalid(h.Value)
			s.log.Info("lockscope: lock value revealed", "by", operatorFrom(r.Context()), "key", key)
		}
	} else if ierr != nil {
		v.RedisError = ierr.Error()
	}
	for _, e := range d.Recent {
		v.Recent = append(v.Recent, apiEvent{
			Type: e.Type.String(), Owner: e.Owner, OwnerB64: b64IfInvalid(e.Owner), Lease: e.Lease, At: e.Time().UTC(),
			Wait: seconds(e.Wait), Hold: seconds(e.Hold), TTL: seconds(e.TTL), Attempts: e.Attempts, Fence: e.Fence,
			Reason: e.Reason, Holder: e.Holder, HolderB64: b64IfInvalid(e.Holder), By: e.By, ByB64: b64IfInvalid(e.By),
			Degraded: e.Degraded, Passive: e.Passive,
		})
	}
	writeJSON(w, r, http.StatusOK, v)
}

type apiWaiter struct {
	Key       string    `json:"key"`
	KeyB64    string    `json:"key_b64,omitempty"`
	Class     string    `json:"class"`
	Owner     string    `json:"owner"`
	OwnerB64  string    `json:"owner_b64,omitempty"`
	Lease     string    `json:"lease"`
	Holder    string    `json:"holder_seen,omitempty"`
	HolderB64 string    `json:"holder_seen_b64,omitempty"`
	Since     time.Time `json:"since"`
	Waiting   float64   `json:"waiting_seconds"`
	Deadline  time.Time `json:"deadline"`
	Holds     []string  `json:"holds_leases"`
}

func newAPIWaiter(x state.Waiter, now time.Time) apiWaiter {
	return apiWaiter{Key: x.Key, KeyB64: b64IfInvalid(x.Key), Class: x.Class, Owner: x.Owner, OwnerB64: b64IfInvalid(x.Owner),
		Lease: x.Lease, Holder: x.Holder, HolderB64: b64IfInvalid(x.Holder), Since: x.Since.UTC(),
		Waiting: seconds(max(now.Sub(x.Since), 0)), Deadline: x.Deadline.UTC(), Holds: nonNil(x.Holds)}
}

type apiBlockingHolder struct {
	Key         string     `json:"key"`
	KeyB64      string     `json:"key_b64,omitempty"`
	Class       string     `json:"class"`
	Owner       string     `json:"owner"`
	OwnerB64    string     `json:"owner_b64,omitempty"`
	Lease       string     `json:"lease,omitempty"`
	Since       *time.Time `json:"since,omitempty"`
	Waiters     int        `json:"waiters"`
	WaitSeconds float64    `json:"wait_seconds"`
	Waiting     bool       `json:"holder_waits_too"`
	Href        string     `json:"href"`
}

type apiChainLink struct {
	Owner    string     `json:"owner"`
	OwnerB64 string     `json:"owner_b64,omitempty"`
	Lease    string     `json:"lease,omitempty"`
	WaitsFor *string    `json:"waits_for"` // null: the holder at the end of the chain
	Since    *time.Time `json:"since,omitempty"`
}

type apiCycleMember struct {
	Owner    string    `json:"owner"`
	OwnerB64 string    `json:"owner_b64,omitempty"`
	Lease    string    `json:"lease"`
	Holds    string    `json:"holds"`
	WaitsFor string    `json:"waits_for"`
	Since    time.Time `json:"waiting_since"`
}

type apiBlocking struct {
	At      time.Time           `json:"at"`
	Waiters int                 `json:"waiters"`
	Holders []apiBlockingHolder `json:"holders"`
	Chains  []struct {
		Links []apiChainLink `json:"links"`
		Cycle bool           `json:"cycle"`
	} `json:"chains"`
	Deadlocks [][]apiCycleMember `json:"deadlocks"`
}

// apiBlocking is GET /api/v1/blocking: who waits on whom now.
func (s *server) apiBlocking(w http.ResponseWriter, r *http.Request) {
	b := s.q.Blocking()
	v := apiBlocking{At: b.At.UTC(), Waiters: b.Waiters, Holders: make([]apiBlockingHolder, 0, len(b.Holders)), Deadlocks: make([][]apiCycleMember, 0, len(b.Cycles))}
	for _, h := range b.Holders {
		v.Holders = append(v.Holders, apiBlockingHolder{Key: h.Key, KeyB64: b64IfInvalid(h.Key), Class: h.Class, Owner: h.Owner, OwnerB64: b64IfInvalid(h.Owner),
			Lease: h.Lease, Since: timeOrNil(h.Since), Waiters: h.Waiters, WaitSeconds: h.WaitSeconds, Waiting: h.Waiting, Href: apiLockPath(h.Key)})
	}
	for _, c := range b.Chains {
		var links []apiChainLink
		for _, l := range c.Links {
			link := apiChainLink{Owner: l.Owner, OwnerB64: b64IfInvalid(l.Owner), Lease: l.Lease, Since: timeOrNil(l.Since)}
			if l.WaitsFor != "" {
				k := l.WaitsFor
				link.WaitsFor = &k
			}
			links = append(links, link)
		}
		v.Chains = append(v.Chains, struct {
			Links []apiChainLink `json:"links"`
			Cycle bool           `json:"cycle"`
		}{links, c.Cycle})
	}
	for _, c := range b.Cycles {
		var ms []apiCycleMember
		for _, m := range c.Members {
			ms = append(ms, apiCycleMember{Owner: m.Owner, OwnerB64: b64IfInvalid(m.Owner), Lease: m.Lease, Holds: m.Holds, WaitsFor: m.WaitsFor, Since: m.Since.UTC()})
		}
		v.Deadlocks = append(v.Deadlocks, ms)
	}
	if v.Chains == nil {
		v.Chains = []struct {
			Links []apiChainLink `json:"links"`
			Cycle bool           `json:"cycle"`
		}{}
	}
	writeJSON(w, r, http.StatusOK, v)
}

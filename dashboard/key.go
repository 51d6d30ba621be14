package dashboard

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/internal/lockjson"
	"github.com/lockscope/lockscope/lock"
)

// One key's page, GET /keys/{key} (key.templ): its holder per the collector
// and per Redis now, the callers waiting, wait and hold distributions, rate
// and recent events. Its JSON mirror is GET /api/v1/locks/{key}, at the end
// of this file. The holder card (holderView) serves the release pages too.

// keyView is the key page's view model.
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
	Waiters     []waiterRow    // callers waiting for the key now
	Semaphore   *semaphoreView // a Redisson semaphore, live from Redis

	Ask *askView // "Ask to release" beside the release (ask.go); nil when not offered
}

// holderView is a lock's holder as a card shows it.
type holderView struct {
	Owner       ownerCell // the owner's page; "" for a foreign holder read from Redis (named by its value, not by its owner)
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
	StuckAfter  string // the class's stuck threshold and the --stuck-after entry that set it
	Waiters     string
	Trace       *traceRef // of the call that obtained the hold; nil if none or unknown
	Headroom    string    // the renewals' headroom: last and least (see headroomText)
	AtRisk      bool      // the least was under a quarter of the TTL
}

type eventRow struct {
	Clock  string
	Ago    string
	AgoAt  string // absolute, for the title
	Type   string
	Times  string // "×14" for a folded run of renewals; "" for one event
	Owner  ownerCell
	Detail string
	Trace  *traceRef
}

// waiterRow is one caller waiting for a key now.
type waiterRow struct {
	Owner      ownerCell
	Key        keyCell
	Waiting    string // for how long
	SinceTitle string // absolute time, on hover
	Deadline   string
	Holds      string // leases it holds while waiting
	Trace      *traceRef
}

func (s *server) keyPage(w http.ResponseWriter, r *http.Request) {
	key, ok := keyFromRequest(r)
	if !ok {
		s.fail(w, r, false, http.StatusBadRequest, "bad key in path")
		return
	}
	d, known := s.q.Lock(key)
	sem, semErr := s.semaphore(r.Context(), key)
	if sem != nil || semErr != nil {
		s.semaphorePage(w, r, key, d, known, sem, semErr)
		return
	}
	if !known && operatorFrom(r.Context()) == "" {
		s.fail(w, r, false, http.StatusNotFound, "lockscope has seen no event for this key; "+untrackedNote+".")
		return
	}
	redisHolder, hidden, err := s.viewerInspect(r, key, known)
	note := s.redisNote(redisHolder, err)
	if hidden {
		note = hiddenNote
	}
	if !known && err != nil {
		s.fail(w, r, false, http.StatusBadGateway, "lockscope has seen no event for this key and "+note)
		return
	}
	if !known && redisHolder == nil {
		s.fail(w, r, false, http.StatusNotFound, "lockscope has seen no event for this key and Redis holds no such lock")
		return
	}
	v := s.keyView(r, key, d, known, redisHolder, note)
	v.CanRelease = v.CanRelease || hidden && !s.readOnly()
	if v.CanRelease {
		v.Ask = s.askViewFor(r.Context(), key, redisHolder)
	}
	s.render(w, r, http.StatusOK, keyPage(v))
}

// redisNote says what Redis answered, for the holder card.
func (s *server) redisNote(h *lock.Holder, err error) string {
	switch {
	case err != nil:
		return "Redis could not be asked: " + err.Error()
	case h == nil && s.rel != nil:
		return "Redis holds no such lock now."
	}
	return ""
}

const eventRows = 25

func (s *server) keyView(r *http.Request, key string, d state.KeyDetail, known bool, rh *lock.Holder, note string) keyView {
	now := s.now()
	v := keyView{
		Page:        s.page(r, "Key", "keys"),
		Key:         newKeyCell(key),
		Bytes:       fmtCount(len(key)) + " bytes",
		Class:       d.Class, // raw: classLink shows it
		Known:       known,
		RedisNote:   note,
		ReleaseHref: releasePath(key),
	}
	if v.Class == "" {
		v.Class = "unclassified"
	}
	v.Page.Title = keytext.Cut(v.Key.Full, 60)
	v.Holder = s.holderFromInfo(d.LockInfo, now)
	if rh != nil {
		v.Redis = holderFromLock(rh, now)
		v.Redis.Waiters = fmtCount(d.Waiters)
		v.Redis.Stuck = d.Stuck
		v.Redis.StuckAfter = stuckThreshold(d.LockInfo)
		v.Redis.Passive = d.Passive
		v.Redis.Fingerprint = "" // shown on the confirmation, where it matters
		sinceFromCollector(v.Redis, rh, d.LockInfo, now)
		if d.Held && d.Lease == rh.Lease {
			v.Redis.Trace = s.traceRef(d.Trace) // the hold the collector saw begin
		}
		headroomFromCollector(v.Redis, rh, d.LockInfo)
	}
	switch {
	case d.Stuck:
		v.State = "stuck"
	case d.Held || rh != nil:
		v.State = "held"
	default:
		v.State = "free"
	}
	v.CanRelease = !s.readOnly() && rh != nil
	v.Stats = []footerItem{
		{"Acquired", fmtCount(d.Acquisitions)},
		{"Contentions", fmtCount(d.Contentions)},
		{"Failed", fmtCount(d.Failures)},
		{"Avg wait", avg(d.Wait.Sum, d.Wait.Count)},
		{"Avg hold", avg(d.Hold.Sum, d.Hold.Count)},
		{"Last event", fmtAgo(now, d.LastEvent)},
	}
	v.Rate = newSpark(trimSeries(d.AcquireSeries, 12), 600, 56, fmtRate, "acquisitions per second")
	v.RateStep = fmtDuration(d.SeriesStep)
	v.Wait = newDist("Wait", "wait", d.Wait)
	if d.Passive && d.Wait.Count == 0 {
		v.Wait.EmptyMsg = "Unknown: this lock is watched passively, and a caller's failed SET NX makes no notification, so waits and contention cannot be seen."
	}
	v.Hold = newDist("Hold", "hold", d.Hold)
	if d.Hold.Count == 0 && d.Held && !d.Since.IsZero() {
		v.Hold.EmptyMsg = "No hold has ended yet: the current one has lasted " + fmtDuration(d.HeldFor(now).Truncate(time.Second))
		if d.Stuck {
			v.Hold.EmptyMsg += ", past the stuck threshold"
		}
		v.Hold.EmptyMsg += "."
	}
	var holder *tlHolder
	switch {
	case rh != nil:
		holder = &tlHolder{Owner: rh.Owner, Lease: rh.Lease, Since: rh.Since}
	case d.Held:
		holder = &tlHolder{Owner: d.Owner, Lease: d.Lease, Since: d.Since}
	}
	v.Timeline = newTimeline(d.Recent, now, holder, s.q.Overlaps(key))
	for _, x := range d.WaitersNow {
		row := newWaiterRow(x, now)
		row.Trace = s.traceRef(x.Trace)
		v.Waiters = append(v.Waiters, row)
	}
	v.Events = s.eventRowsOf(d.Recent, now)
	return v
}

// eventRowsOf is the key page's event list of recent (newest first): at
// most eventRows rows, a run of one lease's renewals folded into one row
// ("renewed ×14 between 10:01:02 and 10:03:30"), so routine renewals do not
// push the acquisitions, expiries and losses out of sight.
func (s *server) eventRowsOf(recent []event.Event, now time.Time) []eventRow {
	var rows []eventRow
	for i := 0; i < len(recent) && len(rows) < eventRows; {
		e := recent[i]
		j := i + 1
		for e.Type == event.Renewed && j < len(recent) && recent[j].Type == event.Renewed && recent[j].Lease == e.Lease && recent[j].Owner == e.Owner {
			j++
		}
		row := eventRow{Clock: fmtClock(e.Time()), Ago: fmtAgo(now, e.Time()), AgoAt: fmtAbs(e.Time()), Type: e.Type.String(), Detail: eventDetail(e),
			Trace: s.traceRef(e.TraceID)}
		if n := j - i; n > 1 {
			first := recent[j-1].Time()
			row.Times = "×" + fmtCount(n)
			row.Detail = fmtCount(n) + " renewals between " + fmtClock(first) + " and " + row.Clock
			if e.TTL > 0 {
				row.Detail += " · ttl " + fmtDuration(e.TTL)
			}
			// The run's closest call stays in sight: the least TTL left
			// when one of its renewals landed.
			var least time.Duration
			for _, r := range recent[i:j] {
				if r.Headroom > 0 && (least == 0 || r.Headroom < least) {
					least = r.Headroom
				}
			}
			if least > 0 {
				row.Detail += " · least headroom " + fmtDuration(least)
			}
		}
		row.Owner = newOwnerCell(e.Owner)
		rows = append(rows, row)
		i = j
	}
	return rows
}

func (s *server) holderFromInfo(l state.LockInfo, now time.Time) *holderView {
	if !l.Held {
		return nil
	}
	h := &holderView{
		Lease:      l.Lease,
		Fence:      fenceText(l.Fence),
		Degraded:   l.Degraded,
		Passive:    l.Passive,
		Stuck:      l.Stuck,
		Waiters:    fmtCount(l.Waiters),
		Trace:      s.traceRef(l.Trace),
		StuckAfter: stuckThreshold(l),
	}
	h.Owner = newOwnerCell(l.Owner)
	if l.Held {
		h.Owner.Href = ownerPath(l.Owner)
	}
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
	h.Headroom, h.AtRisk = headroomText(l)
	return h
}

// headroomText shows how close the hold's renewals came to letting the
// lease lapse: "last 19.8s · least 6s of 30s", and whether the least was
// under a quarter of the TTL (what LockLeaseAtRisk counts).
func headroomText(l state.LockInfo) (string, bool) {
	if l.LastHeadroom <= 0 {
		return "", false
	}
	s := "last " + headroomDuration(l.LastHeadroom) + " · least " + headroomDuration(l.MinHeadroom)
	if l.TTL > 0 {
		s += " of " + fmtDuration(l.TTL)
	}
	return s, l.TTL > 0 && l.MinHeadroom < l.TTL/4
}

// headroomDuration shows a headroom; under a millisecond it says so rather
// than show the 1ns that stands for "nothing provably left".
func headroomDuration(d time.Duration) string {
	if d < time.Millisecond {
		return "<1ms"
	}
	return fmtDuration(d.Truncate(time.Millisecond))
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
	v.Owner = newOwnerCell(h.Owner)
	if !h.Foreign {
		v.Owner.Href = ownerPath(h.Owner)
	}
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

// headroomFromCollector gives a holder read from Redis the headroom of its
// renewals the collector saw, when it is the same hold.
func headroomFromCollector(v *holderView, h *lock.Holder, l state.LockInfo) {
	if !l.Held || l.Owner != h.Owner || (h.Lease != "" && l.Lease != "" && h.Lease != l.Lease) {
		return
	}
	v.Headroom, v.AtRisk = headroomText(l)
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

func eventDetail(e event.Event) string {
	if e.Type == event.Requested {
		return requestedDetail(e)
	}
	var parts []string
	if e.Wait > 0 {
		parts = append(parts, "waited "+fmtDuration(e.Wait))
	}
	if e.Hold > 0 {
		parts = append(parts, "held "+fmtDuration(e.Hold))
	}
	if e.TTL > 0 {
		parts = append(parts, "ttl "+fmtDuration(e.TTL))
	}
	if e.Headroom > 0 {
		parts = append(parts, "headroom "+headroomDuration(e.Headroom))
	}
	if e.Attempts > 1 {
		parts = append(parts, strconv.Itoa(e.Attempts)+" attempts")
	}
	if e.Fence != 0 {
		parts = append(parts, "fence "+strconv.FormatInt(e.Fence, 10))
	}
	if e.Holder != "" {
		h, _ := keytext.Visible(e.Holder)
		parts = append(parts, "held by "+keytext.Cut(h, 40))
	}
	if e.By != "" {
		b, _ := keytext.Visible(e.By)
		parts = append(parts, "by "+b)
	}
	if e.Reason != "" {
		rs, _ := keytext.Visible(e.Reason)
		parts = append(parts, "reason: "+keytext.Cut(rs, 120))
	}
	if e.Count > 0 {
		parts = append(parts, strconv.FormatInt(e.Count, 10)+" dropped")
	}
	if e.Degraded {
		parts = append(parts, "degraded")
	}
	return strings.Join(parts, " · ")
}

func newWaiterRow(x state.Waiter, now time.Time) waiterRow {
	row := waiterRow{Key: newKeyCell(x.Key), Waiting: fmtDuration(now.Sub(x.Since).Truncate(100 * time.Millisecond)),
		SinceTitle: x.Since.Format(time.RFC3339), Deadline: "in " + fmtDuration(x.Deadline.Sub(now).Truncate(time.Second))}
	switch {
	case x.Deadline.IsZero():
		row.Deadline = "not known" // the caller gave none, or it is not seen (a Redisson subscriber)
	case !x.Deadline.After(now):
		row.Deadline = "passed"
	}
	row.Owner = newOwnerCell(x.Owner)
	row.Holds = plural(len(x.Holds), "lock", "locks")
	if len(x.Holds) == 0 {
		row.Holds = "none"
	}
	return row
}

// apiLockDetail is GET /api/v1/locks/{key}.
type apiLockDetail struct {
	apiLockInfo
	Tracked       bool             `json:"tracked"`
	Redis         *lockjson.Holder `json:"redis_holder"` // null: not held in Redis (or no lock client)
	RedisError    string           `json:"redis_error,omitempty"`
	RedisHidden   bool             `json:"redis_hidden,omitempty"` // Redis holds a value shown to operators only (redis_holder null)
	Wait          apiDistribution  `json:"wait"`
	Hold          apiDistribution  `json:"hold"`
	SeriesStep    float64          `json:"series_step_seconds"`
	AcquireSeries []float64        `json:"acquire_series"`
	Recent        []apiEvent       `json:"recent"`
	WaitersNow    []apiWaiter      `json:"waiters_now"`         // callers waiting for the key now, oldest first
	Semaphore     *apiSemaphore    `json:"semaphore,omitempty"` // a Redisson semaphore's permits, live from Redis (a "PATTERN=semaphore" watch rule)
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
	Headroom  float64   `json:"headroom_seconds,omitempty"` // renewed: the TTL left when it landed
	Attempts  int       `json:"attempts,omitempty"`
	Fence     int64     `json:"fence,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Holder    string    `json:"holder,omitempty"`
	HolderB64 string    `json:"holder_b64,omitempty"`
	By        string    `json:"by,omitempty"`
	ByB64     string    `json:"by_b64,omitempty"`
	Degraded  bool      `json:"degraded,omitempty"`
	Passive   bool      `json:"passive,omitempty"`
	TraceID   string    `json:"trace_id,omitempty"` // the emitting call's trace, 32 hex digits
}

type apiWaiter struct {
	Key       string     `json:"key"`
	KeyB64    string     `json:"key_b64,omitempty"`
	Class     string     `json:"class"`
	Owner     string     `json:"owner"`
	OwnerB64  string     `json:"owner_b64,omitempty"`
	Lease     string     `json:"lease"`
	Holder    string     `json:"holder_seen,omitempty"`
	HolderB64 string     `json:"holder_seen_b64,omitempty"`
	Since     time.Time  `json:"since"`
	Waiting   float64    `json:"waiting_seconds"`
	Deadline  *time.Time `json:"deadline"` // null when not known: the caller gave none (or is not seen: a Redisson subscriber)
	Holds     []string   `json:"holds_leases"`
	TraceID   string     `json:"trace_id,omitempty"` // the waiting call's trace
}

func newAPIWaiter(x state.Waiter, now time.Time) apiWaiter {
	return apiWaiter{Key: x.Key, KeyB64: keytext.B64IfInvalid(x.Key), Class: x.Class, Owner: x.Owner, OwnerB64: keytext.B64IfInvalid(x.Owner),
		Lease: x.Lease, Holder: x.Holder, HolderB64: keytext.B64IfInvalid(x.Holder), Since: x.Since.UTC(),
		Waiting: seconds(max(now.Sub(x.Since), 0)), Deadline: lockjson.Time(x.Deadline), Holds: nonNil(x.Holds), TraceID: x.Trace.String()}
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
	sem, semErr := s.semaphore(r.Context(), key)
	isSem := sem != nil || semErr != nil
	if !known && !isSem && operatorFrom(r.Context()) == "" {
		writeJSON(w, r, http.StatusNotFound, apiError{Error: "unknown key: no events seen; " + untrackedNote})
		return
	}
	var h *lock.Holder
	var hidden bool
	var ierr error
	if isSem {
		ierr = semErr // a semaphore's counter is no lock's value
	} else {
		h, hidden, ierr = s.viewerInspect(r, key, known)
	}
	if !known && h == nil && !isSem {
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
	if sem != nil {
		v.Semaphore = newAPISemaphore(sem)
	}
	if h != nil {
		v.Redis = holderJSON(h)
		if v.Redis.Since == nil && d.Held && d.Owner == h.Owner && !d.Since.IsZero() {
			v.Redis.Since = lockjson.Time(d.Since) // a foreign value carries none: when the collector saw it taken
		}
		if reveal != "" && h.Foreign {
			v.Redis.Reveal(h)
			s.log.Info("lockscope: lock value revealed", append([]any{"by", operatorFrom(r.Context())}, keytext.LogAttrs("key", key)...)...)
		}
	} else if ierr != nil {
		v.RedisError = ierr.Error()
	} else if hidden {
		v.RedisHidden = true
	}
	for _, e := range d.Recent {
		v.Recent = append(v.Recent, apiEvent{
			Type: e.Type.String(), Owner: e.Owner, OwnerB64: keytext.B64IfInvalid(e.Owner), Lease: e.Lease, At: e.Time().UTC(),
			Wait: seconds(e.Wait), Hold: seconds(e.Hold), TTL: seconds(e.TTL), Headroom: seconds(e.Headroom), Attempts: e.Attempts, Fence: e.Fence,
			Reason: e.Reason, Holder: e.Holder, HolderB64: keytext.B64IfInvalid(e.Holder), By: e.By, ByB64: keytext.B64IfInvalid(e.By),
			Degraded: e.Degraded, Passive: e.Passive, TraceID: e.TraceID.String(),
		})
	}
	writeJSON(w, r, http.StatusOK, v)
}

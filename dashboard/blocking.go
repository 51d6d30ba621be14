package dashboard

import (
	"net/http"
	"time"

	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/internal/lockjson"
)

// blockingView is the /blocking page.
// Who blocks whom, GET /blocking (blocking.templ): holders ranked by the
// waiters they cause now, waiting chains and deadlocks. Its JSON mirror is
// GET /api/v1/blocking, at the end of this file.

// blockingView is the blocking page's view model.
type blockingView struct {
	Page    page
	Waiters string
	Holders []blockingRow
	Chains  []chainView
	// LockOrder is the lock-order section (lockorder.go): the deadlocks
	// that have not happened yet.
	LockOrder lockOrderView
}

type blockingRow struct {
	Key         keyCell
	Class       string
	Owner       ownerCell
	HeldFor     string
	Waiters     string
	WaitSeconds string
	HolderWaits bool
	Trace       *traceRef // of the hold
}

type chainView struct {
	Links []chainLinkView
	Cycle bool
	// How the chain ends when its last link waits: the holder of that
	// link's key is one of the chain's own callers (a deadlock: EndOwner),
	// or one not seen yet (EndOwner "").
	EndOwner ownerCell
}

type chainLinkView struct {
	Owner    ownerCell
	WaitsFor *keyCell // nil for the final holder
	Waiting  string
	Trace    *traceRef // of the wait (of the hold, for the final holder)
}

// blockingPage is GET /blocking: holders ranked by the waiters they cause,
// waiting chains, deadlocks.
func (s *server) blockingPage(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	b := s.q.Blocking()
	v := blockingView{Page: s.page(r, "Blocking", "blocking"), Waiters: waitingSentence(b.Waiters)}
	for _, h := range b.Holders {
		row := blockingRow{Key: newKeyCell(h.Key), Class: h.Class, Waiters: fmtCount(h.Waiters),
			WaitSeconds: fmtDuration(time.Duration(h.WaitSeconds * float64(time.Second)).Truncate(100 * time.Millisecond)), HolderWaits: h.Waiting,
			HeldFor: "not seen yet", Trace: s.traceRef(h.Trace)}
		row.Owner = linkedOwnerCell(h.Owner)
		if !h.Since.IsZero() {
			row.HeldFor = heldFor(now.Sub(h.Since))
		}
		v.Holders = append(v.Holders, row)
	}
	for _, c := range b.Chains {
		cv := chainView{Cycle: c.Cycle}
		for _, l := range c.Links {
			lv := chainLinkView{Trace: s.traceRef(l.Trace)}
			lv.Owner = newOwnerCell(l.Owner)
			if l.WaitsFor != "" {
				k := newKeyCell(l.WaitsFor)
				lv.WaitsFor = &k
				lv.Waiting = fmtDuration(now.Sub(l.Since).Truncate(100 * time.Millisecond))
			}
			cv.Links = append(cv.Links, lv)
		}
		if last := c.Links[len(c.Links)-1]; last.WaitsFor != "" && c.Cycle {
			// Link i+1 holds the key link i waits for; the key the last
			// waits for is held by the link after the one that also waits
			// for it, or, in a closed cycle, by the first.
			holder := c.Links[0].Owner
			for i := range len(c.Links) - 1 {
				if c.Links[i].WaitsFor == last.WaitsFor {
					holder = c.Links[i+1].Owner
				}
			}
			cv.EndOwner = newOwnerCell(holder)
		}
		v.Chains = append(v.Chains, cv)
	}
	v.LockOrder = newLockOrderView(s.q.LockOrder(""), "", now)
	s.render(w, r, http.StatusOK, blockingPage(v))
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
	TraceID     string     `json:"trace_id,omitempty"` // of the call that obtained the hold
	Href        string     `json:"href"`
}

type apiChainLink struct {
	Owner    string     `json:"owner"`
	OwnerB64 string     `json:"owner_b64,omitempty"`
	Lease    string     `json:"lease,omitempty"`
	WaitsFor *string    `json:"waits_for"` // null: the holder at the end of the chain
	Since    *time.Time `json:"since,omitempty"`
	TraceID  string     `json:"trace_id,omitempty"` // the waiting call's (the final holder's: its hold's)
}

type apiCycleMember struct {
	Owner    string    `json:"owner"`
	OwnerB64 string    `json:"owner_b64,omitempty"`
	Lease    string    `json:"lease"`
	Holds    string    `json:"holds"`
	WaitsFor string    `json:"waits_for"`
	Since    time.Time `json:"waiting_since"`
	TraceID  string    `json:"trace_id,omitempty"` // the waiting call's
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
		v.Holders = append(v.Holders, apiBlockingHolder{Key: h.Key, KeyB64: keytext.B64IfInvalid(h.Key), Class: h.Class, Owner: h.Owner, OwnerB64: keytext.B64IfInvalid(h.Owner),
			Lease: h.Lease, Since: lockjson.Time(h.Since), Waiters: h.Waiters, WaitSeconds: h.WaitSeconds, Waiting: h.Waiting, TraceID: h.Trace.String(), Href: apiLockPath(h.Key)})
	}
	for _, c := range b.Chains {
		var links []apiChainLink
		for _, l := range c.Links {
			link := apiChainLink{Owner: l.Owner, OwnerB64: keytext.B64IfInvalid(l.Owner), Lease: l.Lease, Since: lockjson.Time(l.Since), TraceID: l.Trace.String()}
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
			ms = append(ms, apiCycleMember{Owner: m.Owner, OwnerB64: keytext.B64IfInvalid(m.Owner), Lease: m.Lease, Holds: m.Holds, WaitsFor: m.WaitsFor, Since: m.Since.UTC(), TraceID: m.Trace.String()})
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

// waitingSentence says how many callers wait now, as a sentence.
func waitingSentence(n int) string {
	switch n {
	case 0:
		return "Nobody is waiting for a lock now."
	case 1:
		return "1 caller is waiting for a lock now."
	}
	return fmtCount(n) + " callers are waiting for a lock now."
}

// heldFor is how long a hold has lasted, never "0": under a second it is
// "under a second" rather than a truncated zero.
func heldFor(d time.Duration) string {
	if d < time.Second {
		return "under a second"
	}
	return fmtDuration(d.Truncate(time.Second))
}

// plural is n and the noun, singular for one: "1 lock", "3 locks".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmtCount(n) + " " + many
}

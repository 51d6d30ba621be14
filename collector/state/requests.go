package state

import (
	"strconv"
	"strings"
	"time"

	"github.com/lockscope/lockscope/event"
)

// Release requests: an operator asked a holder to release (a requested
// event), and the state follows the hold asked until it answers. The rule,
// in one sentence: a request is released if its hold is then released by
// its holder, forced if an operator force-releases it, and ignored if the
// hold ends otherwise (expired, lost) or is still held requestPatience
// after the request's grace ran out. Each hold asked is counted once
// (lockscope_release_requests_total{class,outcome}) and is one incident
// (IncidentReleaseRequest) from the first request to the answer: "asked at
// 03:02, released at 03:02:04", "asked, no answer in 30s, forced at 03:03".
//
// The requester writes its event before it publishes the request, so the
// answer normally follows it in the stream; a request read after its
// hold's end (another emitter's batch came first) is decided at once from
// how that hold ended, when the key still says.

// RequestOutcomes are the outcomes a release request is counted under, in
// the order of ClassMetrics.ReleaseRequests.
var RequestOutcomes = [...]string{event.Released.String(), event.Forced.String(), EndedIgnored}

const (
	requestReleased = iota
	requestForced
	requestIgnored
)

// EndedIgnored ends a release_request incident whose holder did not
// answer: its hold ended otherwise, or outlasted the request's patience.
const EndedIgnored = "ignored"

// requestPatience is how long after its grace (after the request itself,
// without one) a release request waits for its answer before it counts as
// ignored.
const requestPatience = 5 * time.Minute

// maxPendingRequests bounds the release requests awaiting an answer: one
// more decides the oldest as ignored. Each keeps its key, lease, owner and
// detail (cut to the limits of limits.go: at most about 2 kB), so pending
// requests hold at most some 2 MB whatever a stream writer sends.
const maxPendingRequests = 1024

// pendingRequest is a hold asked to release that has not answered.
type pendingRequest struct {
	key, lease, owner string
	class             *classState
	at, due           int64 // event clock: the first request, and when it counts as ignored
	id, detail        string
}

// requestKey names a hold asked: its key and lease.
func requestKey(key, lease string) string { return key + "\x00" + lease }

// requestedLocked applies a requested event of k (lease, owner as the
// event names them, kept strings; by and reason interned).
func (a *Aggregator) requestedLocked(k *keyState, e *event.Event, lease, owner, by, reason string, ts int64) {
	if lease == "" {
		return // no hold to follow: the event is in the key's recent events only
	}
	due := after(after(ts, max(e.Wait, 0)), requestPatience)
	rk := requestKey(k.key, lease)
	if p, ok := a.requests[rk]; ok {
		p.due = max(p.due, due) // asked again: the patience runs from the latest
		return
	}
	p := &pendingRequest{key: k.key, lease: lease, owner: owner, class: k.class, at: ts, due: due,
		id: incidentID(IncidentReleaseRequest, k.key, holdID(lease, owner, 0)), detail: requestDetail(by, reason, e.Wait, e.Count)}
	if !k.held && k.lease == lease && k.ended != endNone {
		// The answer came first.
		outcome := requestIgnored
		switch k.ended {
		case endReleased:
			outcome = requestReleased
		case endForced:
			outcome = requestForced
		}
		a.decideRequestLocked(p, outcome, max(k.endedAt, ts))
		return
	}
	if a.requests == nil {
		a.requests = make(map[string]*pendingRequest)
	}
	if len(a.requests) >= maxPendingRequests {
		var oldest *pendingRequest
		for _, q := range a.requests {
			if oldest == nil || q.at < oldest.at {
				oldest = q
			}
		}
		a.decideRequestLocked(oldest, requestIgnored, ts)
	}
	a.requests[rk] = p
	a.requestIncidentLocked(p, 0, "")
}

// answerLocked decides the pending request of the hold e ends, if any.
func (a *Aggregator) answerLocked(k *keyState, e *event.Event, lease string, ts int64) {
	outcome := -1
	switch e.Type {
	case event.Released:
		outcome = requestReleased
		if e.Reason == event.ReasonNotOwner {
			outcome = requestIgnored // it was gone already: expired or taken
		}
	case event.Forced:
		outcome = requestForced
	case event.Lost, event.Expired:
		outcome = requestIgnored
	}
	if outcome < 0 || lease == "" {
		return
	}
	if p, ok := a.requests[requestKey(k.key, lease)]; ok {
		a.decideRequestLocked(p, outcome, ts)
	}
}

// requestsDueLocked decides as ignored the requests whose patience ran out
// by clock (the event clock).
func (a *Aggregator) requestsDueLocked(clock int64) {
	for _, p := range a.requests {
		if clock >= p.due {
			a.decideRequestLocked(p, requestIgnored, clock)
		}
	}
}

// decideRequestLocked counts p's outcome, ends its incident at end and
// forgets it.
func (a *Aggregator) decideRequestLocked(p *pendingRequest, outcome int, end int64) {
	delete(a.requests, requestKey(p.key, p.lease))
	p.class.m.ReleaseRequests[outcome].Inc()
	a.requestIncidentLocked(p, end, RequestOutcomes[outcome])
}

// requestIncidentLocked records p's incident: open (end 0) or answered.
func (a *Aggregator) requestIncidentLocked(p *pendingRequest, end int64, endedBy string) {
	in := Incident{ID: p.id, Kind: IncidentReleaseRequest, Keys: []string{p.key}, Owners: ownersOf(p.owner),
		Start: time.Unix(0, p.at), EndedBy: endedBy, Detail: p.detail}
	if end > 0 {
		in.End = time.Unix(0, max(end, p.at))
	}
	a.incidentLocked(in, false)
}

// requestDetail is what a release_request incident says of its request.
func requestDetail(by, reason string, grace time.Duration, heard int64) string {
	var b strings.Builder
	b.WriteString("asked by ")
	b.WriteString(by)
	if reason != "" {
		b.WriteString(": ")
		b.WriteString(reason)
	}
	if grace > 0 {
		b.WriteString("; grace ")
		b.WriteString(grace.String())
	}
	switch {
	case heard <= 0:
		b.WriteString("; nobody heard it (the holder does not listen)")
	case heard == 1:
		b.WriteString("; heard by 1 listener")
	default:
		b.WriteString("; heard by " + strconv.FormatInt(heard, 10) + " listeners")
	}
	return b.String()
}

package state

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"time"
)

// Incidents: the episodes an operator asks about after the fact ("what
// happened at 3 a.m.?"), derived from the events as they are applied and
// handed to Config.Incidents, which keeps the history (the collector keeps
// it in Redis, shared by every replica).
//
// Every replica applies the same events, so each derives the same
// incidents: an incident's ID is a hash of what identifies it in the events
// (the key and lease of a hold, the leases of a deadlock, an owner and a
// ten-minute bucket), its times are event times wherever the events give
// them, and a record is an upsert the store merges by ID: keys and owners
// are added, the start is the earliest and the end the latest any record
// says. Two replicas, or a restarted one replaying the stream, write the
// same incident, not two.

// IncidentKind names what an incident was.
type IncidentKind string

// Incident kinds.
const (
	// IncidentStuck: a hold lasted past its class's stuck threshold. It
	// starts when the hold crossed the threshold and ends with the hold
	// (released, forced, expired, lost, taken_over).
	IncidentStuck IncidentKind = "stuck"
	// IncidentDeadlock: callers each waited for a lock another of them
	// held. It starts when the last of them began to wait and ends when
	// one wait ended: timed_out, canceled, failed, acquired, or forced
	// (an operator released one of its locks).
	IncidentDeadlock IncidentKind = "deadlock"
	// IncidentLeaseLost: a holder that was still working lost its lease:
	// it found its lock gone or taken (a lost event, or a release that
	// found the lock no longer its own), usually because its TTL lapsed
	// while it worked. Starts when the lease lapsed, if known, and ends
	// when the holder learned of it (ended_by lost or released).
	IncidentLeaseLost IncidentKind = "lease_lost"
	// IncidentHolderExpired: locks whose TTL lapsed while held and whose
	// holder said nothing: it died, hung or lost Redis. One incident per
	// owner and ten minutes (a pod that died holding 40 locks is one
	// incident with 40 keys); ended_by expired. If the holder later
	// reports the loss, a lease_lost incident follows for that key.
	IncidentHolderExpired IncidentKind = "holder_expired"
	// IncidentForced: an operator force-released locks. One incident per
	// holder, operator and reason and ten minutes (a release of every
	// lock of an owner is one incident); ended_by forced.
	IncidentForced IncidentKind = "forced"
	// IncidentWaitQueue: waitQueueMin or more callers waited for one key
	// and the longest for waitQueueAfter. Owners are the holders they
	// waited for; it ends (drained) when fewer wait.
	IncidentWaitQueue IncidentKind = "wait_queue"
	// IncidentReleaseRequest: an operator asked a holder to release
	// (requests.go). It starts with the first request to the hold and
	// ends with the answer: ended_by released (the holder released),
	// forced (an operator forced it) or ignored.
	IncidentReleaseRequest IncidentKind = "release_request"

	// IncidentOverlap: two holders at once (overlap.go). Owners and
	// Leases name the first holder, then the second; it starts when the
	// second acquired and ends when the first stopped believing it held
	// (ended_by: its lost, renew_failed, released or fence_rejected word,
	// or deadline: its TTL's end, when it said nothing). Cause says how the
	// key left the first holder. It is the story of the first hold: its
	// lease_lost fragment merges into it.
	IncidentOverlap IncidentKind = "overlap"
)

// IncidentKinds lists the kinds, in the order pages show them.
var IncidentKinds = [...]IncidentKind{IncidentStuck, IncidentDeadlock, IncidentLeaseLost, IncidentHolderExpired, IncidentForced, IncidentWaitQueue,
	IncidentReleaseRequest, IncidentOverlap}

// How incidents end (Incident.EndedBy), besides the end of a hold
// (released, lost, expired, forced).
const (
	EndedTakenOver = "taken_over" // another lease acquired the key before the hold's end was seen
	EndedTimedOut  = "timed_out"  // a wait gave up at its deadline
	EndedCanceled  = "canceled"   // a wait was canceled
	EndedFailed    = "failed"     // a wait failed (Redis error)
	EndedAcquired  = "acquired"   // a waiter obtained its lock
	EndedDrained   = "drained"    // the queue fell under waitQueueMin
	EndedResolved  = "resolved"   // a deadlock's cycle came apart without a member's wait ending (a lock it held expired)
)

// Wait queue thresholds: the per-key form of LockWaitQueueBuilding.
const (
	waitQueueMin   = 3
	waitQueueAfter = 30 * time.Second
)

// incidentBucket groups forced releases and expirations into one incident.
const incidentBucket = 10 * time.Minute

// Incident limits: the keys and owners a merged incident lists at most.
const (
	MaxIncidentKeys   = 50
	MaxIncidentOwners = 20
)

// Incident is one record of an episode: its opening, an update or its end.
type Incident struct {
	ID      string // deterministic (see above)
	Kind    IncidentKind
	Keys    []string
	Owners  []string
	Start   time.Time
	End     time.Time // zero while open
	EndedBy string    // "" while open
	Detail  string    // what else the events say: the operator and reason, the loss's reason
	// Count is how many events the incident folds (the expirations of a
	// holder_expired, the releases of a forced; 1 for the others), as the
	// state counted them so far: Keys lists at most MaxIncidentKeys.
	Count int

	// An overlap's own (see IncidentOverlap): how the key left its first
	// holder (an OverlapCauses), the two leases, and what the first holder
	// did in the window: renewal attempts refused or failed, and writes
	// its fence guards refused (Fencing says it in words).
	Cause           string
	Leases          []string
	RenewalsRefused int
	WritesRefused   int
}

// Open reports whether the incident has not ended.
func (in Incident) Open() bool { return in.End.IsZero() }

// IncidentSink receives the incident records the state derives. It is
// called with the state's locks held: it must return at once and not call
// back into the state.
type IncidentSink interface {
	Incident(Incident)
}

// incidentID hashes the parts that identify an incident.
func incidentID(kind IncidentKind, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{':'})
		h.Write([]byte(p))
	}
	return string(kind) + ":" + hex.EncodeToString(h.Sum(nil)[:12])
}

// holdID names a hold: its lease, or without one its owner and start.
func holdID(lease, owner string, since int64) string {
	if lease != "" {
		return "l" + lease
	}
	return "o" + owner + "@" + strconv.FormatInt(since, 10)
}

func bucketOf(ts int64) string {
	return strconv.FormatInt(ts/int64(incidentBucket), 10)
}

// incidentLocked counts in (once per ID, while the ID is recent), numbers
// the events it folds and hands it to the sink.
func (a *Aggregator) incidentLocked(in Incident, folds bool) {
	n, seen := a.incSeen.add(in.ID, folds)
	if !seen && !a.muted && !a.incMuted {
		a.tot.Incidents[kindIndex(in.Kind)].Inc()
	}
	in.Count = n
	if a.cfg.Incidents != nil {
		a.cfg.Incidents.Incident(in)
	}
}

func kindIndex(k IncidentKind) int {
	if i := slices.Index(IncidentKinds[:], k); i >= 0 {
		return i
	}
	return 0
}

// recentIDs remembers the last few thousand incident IDs with the events
// each folded, so that an incident is counted once however many records it
// has, and its records carry its count.
type recentIDs struct {
	count map[string]int
	ring  [4096]string
	next  int
}

// add notes a record of id, one more event when folds; it returns the
// events id folds so far (at least 1) and whether id was known.
func (r *recentIDs) add(id string, folds bool) (int, bool) {
	if r.count == nil {
		r.count = make(map[string]int, len(r.ring))
	}
	n, ok := r.count[id]
	if !ok {
		if old := r.ring[r.next]; old != "" {
			delete(r.count, old)
		}
		r.ring[r.next] = id
		r.next = (r.next + 1) % len(r.ring)
		n = 0
	}
	if folds || n == 0 {
		n++
	}
	r.count[id] = n
	return n, ok
}

// Merge returns the incident records a and b (of one ID) say together, as
// the store keeps it. An overlap's record and its first hold's lease_lost
// fragment share an ID: the overlap's kind, times and detail win. Else:
// keys, owners and leases of both (a's first, at most
// MaxIncidentKeys and MaxIncidentOwners), the earliest start, the latest
// end with the way it ended (a record of an open incident never reopens an
// ended one), the larger count, a's kind and the first detail. It is
// commutative but for the order of the lists and a tie of ends: replicas
// that write the same records in any order keep the same incident.
func Merge(a, b Incident) Incident {
	// The fragment of the overlap's story takes the overlap's times and words.
	if a.Kind == IncidentOverlap && b.Kind != IncidentOverlap && b.Kind != "" {
		b.Start, b.End, b.EndedBy, b.Kind, b.Detail = a.Start, a.End, a.EndedBy, a.Kind, a.Detail
	} else if b.Kind == IncidentOverlap && a.Kind != IncidentOverlap && a.Kind != "" {
		a.Start, a.End, a.EndedBy, a.Kind, a.Detail = b.Start, b.End, b.EndedBy, b.Kind, b.Detail
	}
	out := a
	out.Keys = slices.Clone(a.Keys)
	out.Owners = slices.Clone(a.Owners)
	for _, k := range b.Keys {
		if len(out.Keys) < MaxIncidentKeys && !slices.Contains(out.Keys, k) {
			out.Keys = append(out.Keys, k)
		}
	}
	for _, o := range b.Owners {
		if len(out.Owners) < MaxIncidentOwners && !slices.Contains(out.Owners, o) {
			out.Owners = append(out.Owners, o)
		}
	}
	if !b.Start.IsZero() && (out.Start.IsZero() || b.Start.Before(out.Start)) {
		out.Start = b.Start
	}
	if b.End.After(out.End) {
		out.End, out.EndedBy = b.End, b.EndedBy
	} else if b.End.Equal(out.End) && out.EndedBy == "" {
		out.EndedBy = b.EndedBy
	}
	out.Count = max(out.Count, b.Count)
	if out.Detail == "" {
		out.Detail = b.Detail
	}
	if out.Kind == "" {
		out.Kind = b.Kind
	}
	if out.Cause == "" {
		out.Cause = b.Cause
	}
	out.Leases = slices.Clone(a.Leases)
	for _, l := range b.Leases {
		if len(out.Leases) < MaxIncidentOwners && !slices.Contains(out.Leases, l) {
			out.Leases = append(out.Leases, l)
		}
	}
	out.RenewalsRefused = max(out.RenewalsRefused, b.RenewalsRefused)
	out.WritesRefused = max(out.WritesRefused, b.WritesRefused)
	return out
}

package state

import (
	"time"

	"github.com/lockscope/lockscope/event"
)

// This file holds the types of the query results the dashboard (and the
// operator command line) reads. Every query method is safe for concurrent
// use, answers from memory and never waits on ingestion or on Redis.

// Windows are the hot-key windows the collector keeps.
var Windows = []time.Duration{time.Minute, 5 * time.Minute, time.Hour}

// Ranking orders hot keys.
type Ranking string

// Rankings.
const (
	ByContentions Ranking = "contentions" // acquisitions that waited plus refused tries
	ByWait        Ranking = "wait"        // total time callers spent waiting

	// byPassive ranks watched keys by their passive acquisitions; HotKeys
	// lists them after the keys whose contention is known.
	byPassive Ranking = "passive"
)

// Overview is the collector's headline state.
type Overview struct {
	At               time.Time
	AcquireRate      float64       // acquisitions per second over the last minute
	ContentionRatio  float64       // contentions / (acquisitions + refused tries), last minute, 0..1
	WaitP99          time.Duration // over the last 5 minutes, estimated (see Distribution.Quantile)
	WaitMax          time.Duration // the longest wait of the last 5 minutes
	HoldP99          time.Duration // over the last 5 minutes, estimated
	HoldMax          time.Duration // the longest hold that ended in the last 5 minutes
	Held             int           // locks held now
	NoExpiry         int           // locks held now without a TTL (at the last Tick)
	Waiters          int           // callers waiting now
	Stuck            int           // locks held past their stuck threshold now
	Expirations5m    int64         // expired-while-held in the last 5 minutes
	ExpiredWorking5m int64         // of those, under a holder still at work (Expiration.HolderWorking)
	Forced5m         int64         // forced releases in the last 5 minutes
	Failures5m       int64         // failed obtains in the last 5 minutes, refused tries included
	Refused5m        int64         // of those, single tries refused because the lock was held (reason "held")
	Overlaps5m       int64         // two holders at once, found in the last 5 minutes (IncidentOverlap)
	EventsTotal      int64         // events applied since start
	Malformed        int64         // entries that could not be decoded
	Dropped          int64         // events emitters reported dropped
	LastEvent        time.Time     // time of the newest applied event (zero if none)
	TrackedKeys      int           // keys with state in memory
	AcquireSeries    []float64     // acquisitions per second, oldest first, one point per SeriesStep
	ContentionSeries []float64     // contentions per second, aligned with AcquireSeries
	SeriesStep       time.Duration
}

// HotKey is one entry of a hot-key ranking.
type HotKey struct {
	Key          string
	Class        string
	Contentions  int64
	Wait         time.Duration // total wait in the window
	Acquisitions int64
	// Hold is the total time of the holds that ended in the window, while
	// the contention ranking tracked the key (a lower bound; zero in the
	// other rankings).
	Hold time.Duration
	// Error is the space-saving over-estimate bound of the ranked figure:
	// the true value lies in [value-Error, value].
	Error int64
	// ContentionUnknown marks a watched key (seen through keyspace
	// notifications) ranked by its acquisitions, the one figure known of
	// it: a caller that finds it held writes nothing to Redis, so its
	// contentions and wait are unknown, not zero (Contentions and Wait are
	// only those seen, of a Redisson lock's waiters; Error bounds
	// Acquisitions).
	ContentionUnknown bool
}

// LockInfo is the state of one tracked key.
type LockInfo struct {
	Key          string
	Class        string
	Held         bool
	Owner        string // current (or last) holder
	Lease        string
	Since        time.Time     // when the current hold began (zero if not held)
	TTL          time.Duration // last TTL the holder set
	ExpiresAt    time.Time     // when the current hold expires unless renewed
	Fence        int64
	Waiters      int
	Stuck        bool          // held longer than StuckAfter
	StuckAfter   time.Duration // the stuck threshold of the key's class
	StuckRule    string        // the Config.StuckRules pattern that set StuckAfter; "" for the default
	Degraded     bool
	Passive      bool // seen through keyspace notifications
	Acquisitions int64
	Contentions  int64
	Failures     int64
	WaitTotal    time.Duration
	HoldTotal    time.Duration
	LastEvent    time.Time

	// Trace is the trace of the call that obtained the current (or last)
	// hold; zero if none.
	Trace event.TraceID

	// The renewals of the current (or last) hold: the TTL left when the
	// last one landed, and the least any left; 0 when none reported it. A
	// lease renewed every ttl/3 normally keeps two thirds of TTL.
	LastHeadroom time.Duration
	MinHeadroom  time.Duration
}

// NoExpiry reports a held lock without a TTL (a watched key holding a known
// library's token, such as a redis-py Lock without timeout): if its holder
// dies it stays held until someone deletes it.
func (l LockInfo) NoExpiry() bool {
	return l.Held && l.Passive && l.TTL <= 0 && l.ExpiresAt.IsZero()
}

// HeldFor is how long the current hold has lasted at now.
func (l LockInfo) HeldFor(now time.Time) time.Duration {
	if !l.Held || l.Since.IsZero() {
		return 0
	}
	return now.Sub(l.Since)
}

// LockSort names a LockQuery order.
type LockSort string

// Lock orders.
const (
	SortKey         LockSort = "key"
	SortContentions LockSort = "contentions"
	SortWait        LockSort = "wait"
	SortHold        LockSort = "hold" // current hold duration, then total hold
	// SortAttention puts first what needs an operator: stuck holds, then
	// held keys with waiters, then other held keys, each by contentions.
	SortAttention LockSort = "attention"
)

// LockState names a LockQuery state filter.
type LockState string

// Lock states.
const (
	StateHeld     LockState = "held"
	StateStuck    LockState = "stuck"     // held past its class's stuck threshold
	StateWaited   LockState = "waited"    // held, with callers waiting for it now
	StateNoExpiry LockState = "no-expiry" // held without a TTL (LockInfo.NoExpiry)
	StateFree     LockState = "free"
)

// LockQuery selects a page of tracked keys.
type LockQuery struct {
	Search   string    // substring of the key or owner; "" matches all
	Owner    string    // exact owner of the current (or last) hold; "" matches all (with HeldOnly: every lock one owner holds)
	Class    string    // exact class; "" matches all
	HeldOnly bool      // only keys held now
	State    LockState // only keys in this state; "" matches all
	Sort     LockSort  // "" means SortContentions
	Asc      bool      // ascending instead of the default descending (SortKey: ascending by default)
	Offset   int
	Limit    int // 0 means 50; capped at 500
}

// LockPage is one page of a LockQuery.
type LockPage struct {
	Locks []LockInfo
	Total int // matches before paging
}

// Distribution is a histogram: Counts[i] observations <= Bounds[i], the
// last count is for observations above the last bound.
type Distribution struct {
	Bounds []time.Duration
	Counts []int64 // len(Bounds)+1
	Sum    time.Duration
	Count  int64
	Max    time.Duration // the largest observation
}

// KeyDetail is one key with its distributions and recent events.
type KeyDetail struct {
	LockInfo
	Wait          Distribution
	Hold          Distribution
	Recent        []event.Event // newest first, bounded
	AcquireSeries []float64     // per SeriesStep, oldest first
	SeriesStep    time.Duration
	WaitersNow    []Waiter // callers waiting for the key now, oldest first: at most maxWaitersNow (Waiters counts them all)
}

// maxWaitersNow bounds KeyDetail.WaitersNow: a key page lists the oldest
// waiters, and says how many there are.
const maxWaitersNow = 100

// Waiter is a caller waiting for a lock now.
type Waiter struct {
	Key      string
	Class    string
	Owner    string
	Lease    string    // the lease it will hold if it acquires
	Holder   string    // the holder it saw when its wait began
	Since    time.Time // when its wait began
	Deadline time.Time // when the caller gives up; zero when it gave none (the state drops a waiter 5 minutes after it was last said to wait, whatever its deadline)
	Holds    []string  // leases it holds while it waits

	Trace event.TraceID // the waiting call's trace; zero if none
}

// Blocking is who blocks whom now. Its lists are bounded (maxBlocking):
// a page that shows them stays small whatever the stream carries.
type Blocking struct {
	At           time.Time
	Holders      []BlockingHolder // by waiters, then wait-seconds, most first: the first maxBlocking
	HoldersTotal int              // keys with waiters
	Chains       []Chain          // the longest waiting chains (A waits on B waits on C), longest first, then the cycles'
	Cycles       []Cycle          // deadlocks: waiting chains that close on themselves, the first maxBlocking
	CyclesTotal  int
	Waiters      int
}

// maxBlocking bounds the holders, chains and cycles Blocking lists.
const maxBlocking = 50

// BlockingHolder is a held lock with callers waiting for it.
type BlockingHolder struct {
	Key, Class, Owner, Lease string
	Since                    time.Time // zero when the holder is unknown (the waiter saw one the collector has not)
	Waiters                  int
	WaitSeconds              float64 // summed over its waiters, now
	Waiting                  bool    // the holder itself waits for another lock

	Trace event.TraceID // the hold's trace; zero if none or unknown
}

// Chain is a waiting chain: each link waits for the lock held by the next;
// the last link is a holder that does not wait (or, in a cycle, the first).
type Chain struct {
	Links []ChainLink
	Cycle bool
}

// ChainLink is one caller in a chain.
type ChainLink struct {
	Owner    string
	Lease    string
	WaitsFor string // key; "" for the final holder
	Since    time.Time

	Trace event.TraceID // the waiting call's (the final holder's: its hold's); zero if none
}

// Cycle is a deadlock: each member waits for the key the next holds.
type Cycle struct {
	Members []CycleMember
	id      string
}

// CycleMember is one waiting call of a cycle.
type CycleMember struct {
	Owner    string
	Lease    string
	WaitsFor string    // the key it waits for
	Holds    string    // the key of the cycle it holds
	Since    time.Time // when it began to wait

	Trace event.TraceID // the waiting call's trace; zero if none
}

// Expiration is a lock whose TTL lapsed while held.
type Expiration struct {
	Key       string
	Class     string
	Owner     string
	Lease     string
	At        time.Time
	Held      time.Duration
	Confirmed bool // a keyspace notification confirmed it
	// HolderWorking: its holder was still at work after the lock expired
	// (it found the lock lost, a renewal failed, or its release found the
	// lock gone), so it and the next holder may have run at once. Without
	// it the holder has said nothing since: it died, or hangs.
	HolderWorking bool
	// Passive: a watched lock (another library's, seen through keyspace
	// notifications): unless HolderWorking, whether its holder worked on
	// is unknown, not that it died.
	Passive bool
}

// ForcedRelease is an operator's forced release.
type ForcedRelease struct {
	Key    string
	Class  string
	Owner  string // the holder that was released
	By     string
	Reason string
	At     time.Time
	Held   time.Duration
}

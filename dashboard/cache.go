package dashboard

import (
	"runtime"
	"sync"
	"time"

	"github.com/lockscope/lockscope/collector/state"
)

// sharedQuerier shares the answers of the Querier's heavy queries between
// the requests that ask them, as River's UI computes its heavy queries
// once and serves every request from the result: a crowd of readers costs
// one computation, not one each.
//
// A query of 100 000 keys (Locks, a scan of every key; Stuck; Blocking;
// Deadlocks, which every page asks for its banner) costs milliseconds. 200
// clients asking at once each ran their own, each with megabytes of
// candidates, and pages took 8 to 14 s while serve grew past a gigabyte.
// Here:
//
//   - a request whose query is being computed waits for that computation
//     and shares its answer;
//   - an answer is reused for ten times what it took to compute (at most
//     reuseMax): the computations of a query then take a tenth of a core
//     at most, however many ask, and an answer is never older than ten of
//     them. An answer computed in under reuseMin is not reused: a small
//     state is always answered fresh, as before;
//   - at most one computation per core (two at least) runs at once: the others wait their
//     turn, and memory holds that many sets of candidates.
//
// Answers are shared read-only: the handlers only read them.
type sharedQuerier struct {
	Querier
	builds chan struct{} // a slot per computation running
	now    func() time.Time

	mu      sync.Mutex
	answers map[query]*answer

	joined func() // called when a request joins a running computation (tests)
}

// Reuse bounds: see sharedQuerier.
const (
	reuseFactor = 10
	reuseMin    = time.Millisecond
	reuseMax    = time.Second
	maxAnswers  = 64 // answers kept; past it the oldest go
)

// query names one computation: its kind, and for Locks its query.
type query struct {
	kind   uint8
	locks  state.LockQuery
	window time.Duration // qClassStats
}

const (
	qLocks uint8 = iota
	qStuck
	qBlocking
	qDeadlocks
	qClassStats
)

// answer is one computation, running or done.
type answer struct {
	done  chan struct{} // closed once val is set
	val   any
	start time.Time
	took  time.Duration
}

// fresh reports whether a done answer may still be served at now.
func (a *answer) fresh(now time.Time) bool {
	if a.took < reuseMin {
		return false
	}
	return now.Sub(a.start) <= min(reuseFactor*a.took, reuseMax)
}

var _ Querier = (*sharedQuerier)(nil)

// newSharedQuerier shares q's heavy queries; now is the clock that times
// them.
func newSharedQuerier(q Querier, now func() time.Time) *sharedQuerier {
	return &sharedQuerier{Querier: q, now: now, answers: make(map[query]*answer),
		builds: make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))}
}

// get returns the answer to k: shared with a computation running or fresh
// enough, else computed by build.
func (s *sharedQuerier) get(k query, build func() any) any {
	s.mu.Lock()
	if a := s.answers[k]; a != nil {
		select {
		case <-a.done:
			if a.fresh(s.now()) {
				s.mu.Unlock()
				return a.val
			}
		default:
			s.mu.Unlock()
			if s.joined != nil {
				s.joined()
			}
			<-a.done
			return a.val
		}
	}
	a := &answer{done: make(chan struct{})}
	s.answers[k] = a
	s.sweepLocked()
	s.mu.Unlock()

	s.builds <- struct{}{}
	a.start = s.now()
	a.val = build()
	a.took = s.now().Sub(a.start)
	<-s.builds
	close(a.done)
	return a.val
}

// sweepLocked drops the answers no longer fresh, and the oldest past
// maxAnswers.
func (s *sharedQuerier) sweepLocked() {
	now := s.now()
	var oldest *query
	var oldestAt time.Time
	for k, a := range s.answers {
		select {
		case <-a.done:
		default:
			continue // running: its waiters need it
		}
		if !a.fresh(now) {
			delete(s.answers, k)
			continue
		}
		if oldest == nil || a.start.Before(oldestAt) {
			kk := k
			oldest, oldestAt = &kk, a.start
		}
	}
	if len(s.answers) > maxAnswers && oldest != nil {
		delete(s.answers, *oldest)
	}
}

func (s *sharedQuerier) Locks(q state.LockQuery) state.LockPage {
	return s.get(query{kind: qLocks, locks: q}, func() any { return s.Querier.Locks(q) }).(state.LockPage)
}

func (s *sharedQuerier) Stuck() []state.LockInfo {
	return s.get(query{kind: qStuck}, func() any { return s.Querier.Stuck() }).([]state.LockInfo)
}

func (s *sharedQuerier) Blocking() state.Blocking {
	return s.get(query{kind: qBlocking}, func() any { return s.Querier.Blocking() }).(state.Blocking)
}

func (s *sharedQuerier) Deadlocks() []state.Cycle {
	return s.get(query{kind: qDeadlocks}, func() any { return s.Querier.Deadlocks() }).([]state.Cycle)
}

// ClassStats is shared: the overview asks for it on every render (its
// advice count), the classes page and the advice API too.
func (s *sharedQuerier) ClassStats(window time.Duration) []state.ClassStats {
	return s.get(query{kind: qClassStats, window: window}, func() any { return s.Querier.ClassStats(window) }).([]state.ClassStats)
}

package lock

import "time"

// tuner chooses how many round trips a batcher keeps in flight, by
// measurement on the running client rather than by a constant.
//
// Why: the best number depends on the host, not on the code. Where Redis
// and the client share two cores, one pipeline in flight makes them take
// turns, and with 8 callers a core idled while callers queued behind a
// round trip (0.69x redislock there, 1.64x on another host with the same
// code: issue 28). Where the machine is loaded, or with 64 callers, every
// extra round trip costs a wake-up and a few syscalls on both sides, and
// deep batches win. A constant tuned on one host loses on the next.
//
// How: the objective is the mean latency of the calls (from the caller's
// arrival to its reply), which a closed loop of callers turns into
// throughput (Little's law) and an open loop feels directly. A client
// starts with every round trip the pool allows, so callers send on their
// own as plain go-redis calls do, and batching has to earn its place. The
// tuner compares its limit with another in a round of alternating windows
// (limit, probe, limit, ...), the way benchmarks on a shared machine
// interleave two binaries: a slow phase of the machine then hits both
// alike. It moves to the probe only if the probe won every pair of the
// round and on the whole, by a margin: 3 % when it has more round trips in
// flight, 1 % when fewer (fewer cost less CPU on both sides, so they win
// near-ties); on a noisy host or where the limit makes no difference it
// then stays put rather than wander. The probe is a neighbour
// about a quarter away, or, in the first round and every third, the far
// end (see far). After a move it probes on in the same direction at once,
// twice as far. A round ends at the first pair the probe loses, so a bad
// probe costs one window, not four; after a round that kept the limit the
// tuner rests, twice as long each time up to maxRest windows, so a settled
// client spends little time on worse limits.
//
// A window closes after winCalls calls and winMin of time, whichever
// comes later: enough calls that a window's mean is not one slow wake-up,
// and longer than a scheduler time slice on a busy host. The window after
// a change of limit is not counted: the callers still move as the previous
// limit set them. Traced on 24 new clients with 8 callers: after a window
// at one round trip in flight, the next window of direct sends (20) often
// measured 80-130 µs a call instead of its usual 210-230 µs (the callers
// were still in step, their commands reached Redis together), so the
// probe did not win every pair; one client in five then kept direct sends
// for 0.5-2.5 s at 16-18 k cycles/s instead of 30 k (issue 28).
type tuner struct {
	limit int // the limit being measured now (the probe during its windows)
	base  int // the settled limit
	probe int // the neighbour under comparison; 0 while resting
	max   int

	win   int           // windows closed in this round
	n     int           // calls completed in the current window
	lat   time.Duration // their summed latency
	start time.Time     // the current window's opening
	sum   [2]time.Duration
	cnt   [2]int
	last  float64 // mean latency of the round's last window of base
	wins  int     // pairs in which the probe beat base

	rest    int  // windows left before the next round
	restLen int  // the next rest, doubled after each round that kept base
	down    bool // the next round probes below base
	stride  int  // how far the next probe goes; 0: about a quarter of base
	rounds  int  // rounds begun: the first, and every third after it, probe far
	settle  bool // the current window follows a change of limit: not counted
}

const (
	winCalls   = 200
	winMin     = 2 * time.Millisecond
	roundPairs = 4    // pairs of windows (limit, probe) in one round
	upMargin   = 0.03 // a probe with more round trips in flight must be this much faster
	downMargin = 0.01 // and one with fewer this much: noise alone rarely moves the limit
	maxRest    = 128  // windows
)

func newTuner(max int) *tuner {
	return &tuner{limit: max, base: max, max: max}
}

// step returns the neighbour of l to probe: stride away after a move (which
// doubles at each move in a row, so a client far from its best gets there in
// a few rounds), else about a quarter away, at least one.
func (t *tuner) step(l int, down bool) int {
	d := t.stride
	if d == 0 {
		d = max(1, l/4)
	}
	if down {
		return max(1, l-d)
	}
	return min(t.max, l+d)
}

// far returns the other end of the range from base: all round trips the
// pool allows (every caller sends on its own, as plain go-redis calls do)
// from the lower half, one (every call but a lone one batched) from the
// upper. The landscape is not smooth between them: with 8 callers, 2 to 7
// round trips in flight measured within a few percent of each other, all
// well below 8, where no caller queues any more (issue 28). A neighbour
// search alone would stop short of the jump.
func (t *tuner) far() int {
	if 2*t.base <= t.max {
		return t.max
	}
	return 1
}

// observe counts n calls completed at now, whose latencies sum to lat, and
// returns the limit to use from now on.
func (t *tuner) observe(now time.Time, n int, lat time.Duration) int {
	if t.start.IsZero() {
		t.start = now
	}
	t.n += n
	t.lat += lat
	if t.n < winCalls || now.Sub(t.start) < winMin {
		return t.limit
	}
	n, lat = t.n, t.lat
	t.n, t.lat, t.start = 0, 0, now
	if t.settle {
		t.settle = false
		return t.limit
	}

	if t.probe == 0 {
		if t.rest > 0 {
			t.rest--
			return t.limit
		}
		t.rounds++
		if t.stride == 0 && t.rounds%3 == 1 {
			t.probe = t.far()
		} else {
			t.probe = t.step(t.base, t.down)
		}
		if t.probe == t.base {
			t.down = !t.down
			t.probe = t.step(t.base, t.down)
		}
		if t.probe == t.base { // max is 1: nothing to compare
			t.probe, t.rest = 0, maxRest
			return t.limit
		}
		t.win, t.wins, t.sum, t.cnt = 0, 0, [2]time.Duration{}, [2]int{}
		return t.set(t.base) // the first window of a round measures base
	}

	arm := t.win % 2
	t.sum[arm] += lat
	t.cnt[arm] += n
	t.win++
	margin := 1 - downMargin
	if t.probe > t.base {
		margin = 1 - upMargin
	}
	lost := false
	if mean := float64(lat) / float64(n); arm == 0 {
		t.last = mean
	} else if mean < t.last*margin {
		t.wins++
	} else {
		lost = true // a move needs every pair: the round is decided
	}
	if !lost && t.win < 2*roundPairs {
		next := t.base
		if t.win%2 == 1 {
			next = t.probe
		}
		return t.set(next)
	}

	baseMean := float64(t.sum[0]) / float64(t.cnt[0])
	probeMean := float64(t.sum[1]) / float64(t.cnt[1])
	if !lost && probeMean < baseMean*margin {
		t.down = t.probe < t.base // keep going the same way
		t.stride = 2 * abs(t.probe-t.base)
		if t.probe == t.far() {
			// From the other end, refine back towards where it came from.
			t.down, t.stride = !t.down, 0
		}
		t.base = t.probe
		t.rest, t.restLen = 0, 0
	} else {
		t.down = !t.down
		t.stride = 0
		t.restLen = min(max(1, 2*t.restLen), maxRest)
		t.rest = t.restLen
	}
	t.probe = 0
	return t.set(t.base)
}

// set makes l the limit from now on; a change makes the next window a
// settling one.
func (t *tuner) set(l int) int {
	if l != t.limit {
		t.settle = true
	}
	t.limit = l
	return l
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

package event

import (
	"strconv"
	"strings"
	"sync"
	"time"
)

// Retention is the rule by which every writer of a stream trims it by age:
// the Go emitter (lock's stream sinks), the passive watcher's writer, and
// the Python and Node emitters, which copy it (docs/events.md,
// "Retention"). A writer keeps one Retention per stream it writes.
//
// A stream keeps no time but its entry IDs, and any writer of the stream
// may choose one: XADD accepts an explicit ID, and after an ID in the
// future Redis numbers every later entry after it (same milliseconds, the
// sequence counting up). So the rule trusts no ID:
//
//   - The clock is Redis's own (TIME, asked again every RetentionClockEvery
//     and applied to the local monotonic clock in between), never an entry
//     ID nor the writer's clock: a writer whose clock runs ahead cannot trim
//     what others wrote a moment ago, an ID in the future cannot trim
//     anyone's recent entries.
//   - Each XADD trims with MINID ~ (Redis's time − MaxAge).
//   - When the ID the stream gave this writer's last entry, P-S, lies ahead
//     of Redis's time, the entries since the future ID are P-0 … P-S and no
//     age reaches them: once S ≥ RetentionAheadKeep the MINID is instead
//     P-(S − RetentionAheadKeep), which keeps the newest RetentionAheadKeep
//     of them (and drops everything older, all older than they are). So a
//     stream with an entry ID of 9999999999999-0 stays bounded.
//
// Until Redis's time is known (TIME not yet answered, or refused) the
// writer's own clock stands in for it. It is safe for concurrent use.
type Retention struct {
	maxAge time.Duration

	mu     sync.Mutex
	offset time.Duration // Redis's clock minus the local one
	synced time.Time     // local time of the last TIME; zero: never
	ms     uint64        // the newest entry ID the stream gave this writer
	seq    uint64
}

const (
	// RetentionClockEvery is how often a writer asks Redis for its time.
	RetentionClockEvery = time.Minute
	// RetentionAheadKeep is how many entries a stream keeps after an ID in
	// the future (see Retention).
	RetentionAheadKeep = 100_000
)

// NewRetention returns the rule for a stream trimmed to maxAge (0 or less:
// never trimmed by age; MinID then returns "").
func NewRetention(maxAge time.Duration) *Retention { return &Retention{maxAge: maxAge} }

// SyncClock asks Redis for its time (ask: a TIME call) when the first of
// rules needs it, once every RetentionClockEvery, and sets it on each of
// rules (the partitions of one writer share one question). A refusal (an
// ACL without +time) leaves the local clock standing in until the next.
func SyncClock(ask func() (time.Time, error), rules ...*Retention) {
	if len(rules) == 0 || rules[0] == nil || rules[0].maxAge <= 0 {
		return
	}
	sent := time.Now()
	r0 := rules[0]
	r0.mu.Lock()
	due := r0.synced.IsZero() || sent.Sub(r0.synced) >= RetentionClockEvery
	r0.mu.Unlock()
	if !due {
		return
	}
	t, err := ask()
	received := time.Now()
	offset := t.Sub(sent.Add(received.Sub(sent) / 2))
	for _, r := range rules {
		r.mu.Lock()
		if err == nil {
			r.offset = offset
		}
		r.synced = received
		r.mu.Unlock()
	}
}

// Written records the ID the stream gave an entry this writer added.
func (r *Retention) Written(id string) {
	ms, seq, ok := ParseID(id)
	if !ok || r == nil {
		return
	}
	r.mu.Lock()
	if ms > r.ms || ms == r.ms && seq > r.seq {
		r.ms, r.seq = ms, seq
	}
	r.mu.Unlock()
}

// MinID is the MINID of the writer's next XADD at local time now, "" for
// none (no age set, or Redis's time not past MaxAge).
func (r *Retention) MinID(now time.Time) string {
	if r == nil || r.maxAge <= 0 {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	redisMS := now.Add(r.offset).UnixMilli()
	if r.ms > uint64(max(redisMS, 0)) && r.seq >= RetentionAheadKeep {
		return strconv.FormatUint(r.ms, 10) + "-" + strconv.FormatUint(r.seq-RetentionAheadKeep, 10)
	}
	if cut := redisMS - r.maxAge.Milliseconds(); cut > 0 {
		return strconv.FormatInt(cut, 10)
	}
	return ""
}

// ParseID splits a stream entry ID ("1700000000000-0") into its
// milliseconds and sequence.
func ParseID(id string) (ms, seq uint64, ok bool) {
	a, b, found := strings.Cut(id, "-")
	ms, err := strconv.ParseUint(a, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	if !found {
		return ms, 0, true
	}
	if seq, err = strconv.ParseUint(b, 10, 64); err != nil {
		return 0, 0, false
	}
	return ms, seq, true
}

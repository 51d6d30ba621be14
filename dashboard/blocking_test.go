package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// /blocking reads as sentences: callers counted in words that agree with
// their number, a hold begun a moment ago is not "held for 0", and a
// deadlock's chain ends on the caller it comes back to, not on a dangling
// "held by".
func TestBlockingReadsAsSentences(t *testing.T) {
	f := newFixture(t, nil)
	now := time.Now()
	at := func(ago time.Duration) int64 { return now.Add(-ago).UnixNano() }
	x, y, fresh := f.pfx+"account:1", f.pfx+"account:2", f.pfx+"report:1"
	a, b := "transfer-a/pod-1", "transfer-b/pod-2"
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: x, Owner: a, Lease: "l-a", TS: at(3 * time.Second), TTL: time.Minute, Attempts: 1},
		{Type: event.Acquired, Key: y, Owner: b, Lease: "l-b", TS: at(3 * time.Second), TTL: time.Minute, Attempts: 1},
		{Type: event.Waiting, Key: y, Owner: a, Lease: "l-a2", TS: at(2 * time.Second), Wait: 30 * time.Second, Holder: b, Reason: "l-a"},
		{Type: event.Waiting, Key: x, Owner: b, Lease: "l-b2", TS: at(2 * time.Second), Wait: 30 * time.Second, Holder: a, Reason: "l-b"},
		{Type: event.Acquired, Key: fresh, Owner: "reporter", Lease: "l-r", TS: at(200 * time.Millisecond), TTL: time.Minute, Attempts: 1},
		{Type: event.Waiting, Key: fresh, Owner: "reader", Lease: "l-w", TS: at(100 * time.Millisecond), Wait: time.Minute, Holder: "reporter"},
	})
	f.agg.Tick()
	doc := htmlDoc(t, f.do(t, req{target: "/blocking"}))
	if got := text(one(t, doc, "waiters-now")); got != "3 callers are waiting for a lock now." {
		t.Errorf("waiters sentence = %q, want \"3 callers are waiting for a lock now.\"", got)
	}
	var freshHeld string
	for _, row := range byTestID(doc, "blocking-row") {
		if attr(one(t, row, "blocking-key"), "title") == fresh {
			freshHeld = text(byTag(row, "td")[2])
		}
	}
	if freshHeld != "under a second" {
		t.Errorf("held for of a hold begun 200 ms ago = %q, want \"under a second\"", freshHeld)
	}
	var cycle string
	for _, c := range byTestID(doc, "chain") {
		if s := strings.Join(strings.Fields(text(c)), " "); strings.Contains(s, "deadlock") {
			cycle = s
		}
	}
	if cycle == "" || strings.HasSuffix(cycle, "held by") || !strings.Contains(cycle, "already in this chain: a deadlock.") {
		t.Errorf("deadlock chain reads %q, want it to end on the caller it comes back to", cycle)
	}
	// Both callers, and the first of them again where the cycle closes.
	if n := strings.Count(cycle, a) + strings.Count(cycle, b); n != 3 {
		t.Errorf("deadlock chain %q names its callers %d times, want 3 (the first again at the end)", cycle, n)
	}
	if got := waitingSentence(1); got != "1 caller is waiting for a lock now." {
		t.Errorf("waitingSentence(1) = %q", got)
	}
	if got := waitingSentence(0); got != "Nobody is waiting for a lock now." {
		t.Errorf("waitingSentence(0) = %q", got)
	}
}

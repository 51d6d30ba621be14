package state

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// TestQueuesOfMatchesSortedWaiters: each key's queue as incidents read it
// (count, oldest waiter by since then lease, since of the min-th oldest)
// equals what sorting every waiter gives, with waiters arriving out of
// their since order and sharing sinces.
func TestQueuesOfMatchesSortedWaiters(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		var w waits
		w.init()
		n := rng.IntN(200)
		for _, i := range rng.Perm(n) { // leases arrive out of their order too
			key := fmt.Sprintf("k%d", rng.IntN(8))
			e := event.Event{Type: event.Waiting, Key: key, Owner: "o", Lease: fmt.Sprintf("l%03d", i), Wait: time.Minute}
			w.add(&e, "c", int64(rng.IntN(20))) // sinces collide and arrive out of order
		}
		want := map[string]keyQueue{}
		byKey := map[string][]waiter{}
		for _, x := range w.snapshot() { // oldest first, ties by lease
			byKey[x.key] = append(byKey[x.key], x)
		}
		for key, ws := range byKey {
			if len(ws) >= waitQueueMin {
				want[key] = keyQueue{key: key, n: len(ws), first: ws[0].lease, since: ws[0].since, minthAt: ws[waitQueueMin-1].since}
			}
		}
		got := map[string]keyQueue{}
		for _, q := range w.queuesOf(waitQueueMin) {
			got[q.key] = q
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: %d queues, want %d", round, len(got), len(want))
		}
		for key, q := range want {
			if got[key] != q {
				t.Errorf("round %d, %s: %+v, want %+v", round, key, got[key], q)
			}
		}
	}
}

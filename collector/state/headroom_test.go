package state

import (
	"slices"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// TestRenewalHeadroom: each renewal's headroom is observed (seconds, and as
// a fraction of the TTL it renewed), the hold keeps its last and smallest,
// a new hold starts afresh, and the key's recent events carry it.
func TestRenewalHeadroom(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(time.Minute))
	ren := func(at, ttl, headroom time.Duration) event.Event {
		e := renewed("job:1", "A", "L1", at, ttl)
		e.Headroom = headroom
		return e
	}
	a.Apply([]event.Event{
		acquired("job:1", "A", "L1", 0, 0, 1, 30*time.Second),
		ren(10*time.Second, 30*time.Second, 20*time.Second),
		ren(30*time.Second, 60*time.Second, 6*time.Second), // late: 6 s of the 30 s it renewed
		ren(40*time.Second, 60*time.Second, 50*time.Second),
		renewed("job:1", "A", "L1", 45*time.Second, 60*time.Second), // an emitter without headroom
	})
	tl := tallyOf(a)
	if n, sum := tl.observed("headroom", "job:*"), tl.get("headroom", "job:*"); n != 3 || sum != 76 {
		t.Errorf("headroom observations = %d summing %vs, want 3 summing 76s", n, sum)
	}
	// 20/30, 6/30, 50/60
	if n, sum := tl.observed("headroom_ratio", "job:*"), tl.get("headroom_ratio", "job:*"); n != 3 || !closeTo(sum, 20.0/30+6.0/30+50.0/60) {
		t.Errorf("headroom ratio observations = %d summing %v, want 3 summing %v", n, sum, 20.0/30+6.0/30+50.0/60)
	}
	d := mustLock(t, a, "job:1")
	if d.LastHeadroom != 50*time.Second || d.MinHeadroom != 6*time.Second {
		t.Errorf("Lock(job:1) headroom last, min = %v, %v, want 50s, 6s", d.LastHeadroom, d.MinHeadroom)
	}
	var got []time.Duration
	for _, e := range d.Recent {
		if e.Type == event.Renewed {
			got = append(got, e.Headroom)
		}
	}
	if want := []time.Duration{0, 50 * time.Second, 6 * time.Second, 20 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("recent renewals' headroom (newest first) = %v, want %v", got, want)
	}

	// The next hold starts with none; a headroom under a millisecond is
	// kept as the least one can be, not as unknown.
	a.Apply([]event.Event{
		ended(event.Released, "job:1", "A", "L1", 50*time.Second, 0, ""),
		acquired("job:1", "B", "L2", 51*time.Second, 0, 1, 10*time.Second),
	})
	if d := mustLock(t, a, "job:1"); d.LastHeadroom != 0 || d.MinHeadroom != 0 {
		t.Errorf("new hold's headroom last, min = %v, %v, want none", d.LastHeadroom, d.MinHeadroom)
	}
	e := renewed("job:1", "B", "L2", 59*time.Second, 10*time.Second)
	e.Lease = "L2"
	e.Owner = "B"
	e.Headroom = 300 * time.Microsecond
	a.Apply([]event.Event{e})
	if d := mustLock(t, a, "job:1"); d.LastHeadroom <= 0 || d.LastHeadroom >= time.Millisecond || d.MinHeadroom != d.LastHeadroom {
		t.Errorf("sub-millisecond headroom last, min = %v, %v, want under 1ms and known", d.LastHeadroom, d.MinHeadroom)
	}
	// A renewal of another lease (not the hold we know) is counted in the
	// histograms but leaves the hold's figures alone.
	other := renewed("job:1", "C", "L9", 59*time.Second, 10*time.Second)
	other.Headroom = time.Second
	a.Apply([]event.Event{other})
	if n := tl.observed("headroom", "job:*"); n != 5 {
		t.Errorf("headroom observations = %d, want 5", n)
	}
	if d := mustLock(t, a, "job:1"); d.LastHeadroom >= time.Millisecond {
		t.Errorf("hold's last headroom = %v after another lease's renewal, want its own", d.LastHeadroom)
	}
}

func closeTo(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

package lock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/eventrec"
	"github.com/lockscope/lockscope/internal/testkit/redistest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/lockscope/lockscope/event"
)

// TestEventFields reads back every field of each event type the client
// records. Times vary, so TS, Wait and Hold are checked for range and the
// rest compared exactly.
func TestEventFields(t *testing.T) {
	c, rdb, rec, p := newClient(t, "app/host/1")
	key := p + "k"
	ctx := context.Background()
	before := time.Now().UnixNano()

	l := mustObtain(t, c, key, time.Second, &ObtainOptions{Fencing: true})
	if _, _, err := New(rdb, &Options{Owner: "other", Recorder: rec}).Try(ctx, key, time.Second, nil); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Try = %v, want ErrNotObtained", err)
	}
	if err := l.Refresh(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := mustObtain(t, c, key, time.Second, nil)
	rdb.Del(ctx, key)
	if err := l2.Refresh(ctx, time.Second); !errors.Is(err, ErrLost) {
		t.Fatalf("Refresh of deleted = %v, want ErrLost", err)
	}
	if err := l2.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release of deleted = %v, want ErrNotHeld", err)
	}
	l3 := mustObtain(t, c, key, time.Second, nil)
	h, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceRelease(ctx, key, h.Fingerprint, "operator", "stuck"); err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixNano()

	want := []event.Event{
		{Type: event.Acquired, Key: key, Owner: "app/host/1", Lease: l.ID(), TTL: time.Second, Attempts: 1, Fence: l.Fence()},
		{Type: event.Failed, Key: key, Owner: "other", Attempts: 1, Reason: event.ReasonHeld, Holder: "app/host/1"},
		{Type: event.Renewed, Key: key, Owner: "app/host/1", Lease: l.ID(), TTL: 2 * time.Second, Fence: l.Fence()},
		{Type: event.Released, Key: key, Owner: "app/host/1", Lease: l.ID(), Fence: l.Fence()},
		{Type: event.Acquired, Key: key, Owner: "app/host/1", Lease: l2.ID(), TTL: time.Second, Attempts: 1},
		{Type: event.Lost, Key: key, Owner: "app/host/1", Lease: l2.ID(), Reason: event.ReasonNotOwner},
		{Type: event.Released, Key: key, Owner: "app/host/1", Lease: l2.ID(), Reason: event.ReasonNotOwner},
		{Type: event.Acquired, Key: key, Owner: "app/host/1", Lease: l3.ID(), TTL: time.Second, Attempts: 1},
		{Type: event.Forced, Key: key, Owner: "app/host/1", Lease: l3.ID(), By: "operator", Reason: "stuck"},
	}
	got := rec.Events()
	span := time.Duration(after - before) // every wait and hold lies within it, however slow the host
	if l.Fence() <= 0 {
		t.Errorf("fenced lease Fence() = %d, want > 0", l.Fence())
	}
	for i, e := range got {
		if e.TS < before || e.TS > after {
			t.Errorf("event %d (%v) TS %d outside [%d, %d]", i, e.Type, e.TS, before, after)
		}
		switch e.Type {
		case event.Acquired, event.Failed:
			if e.Wait <= 0 || e.Wait > span {
				t.Errorf("event %d (%v) Wait = %v, want in (0, %v] (the test's own span)", i, e.Type, e.Wait, span)
			}
		case event.Released, event.Lost, event.Forced:
			if e.Hold <= 0 || e.Hold > span {
				t.Errorf("event %d (%v) Hold = %v, want in (0, %v] (the test's own span)", i, e.Type, e.Hold, span)
			}
		case event.Renewed:
			// What was left of the obtain's 1 s TTL (TestRefreshHeadroom
			// bounds it precisely).
			if e.Headroom <= 0 || e.Headroom > time.Second {
				t.Errorf("event %d (%v) Headroom = %v, want in (0, 1s]", i, e.Type, e.Headroom)
			}
		}
	}
	// The failed event carries the lease id the refused try would have had.
	if len(got) > 1 {
		if got[1].Lease == "" || got[1].Lease == l.ID() {
			t.Errorf("failed event lease = %q, want the refused try's own id", got[1].Lease)
		}
		want[1].Lease = got[1].Lease
	}
	ignore := cmpopts.IgnoreFields(event.Event{}, "TS", "Wait", "Hold", "Headroom")
	if d := cmp.Diff(want, got, ignore); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
}

// TestCycleEventTimes checks the times of an obtain's and a release's
// events: the acquired event carries the lease's since and a wait that ends
// within the Obtain call, the released event is stamped within the Release
// call, and its hold is its time less the acquisition's. Both ways to Redis:
// a direct send (no deadline) and the flusher (a deadline the client does
// not enforce).
func TestCycleEventTimes(t *testing.T) {
	for _, deadline := range []bool{false, true} {
		c, _, rec, p := newClient(t, "app/host/1")
		key := p + "k"
		ctx := context.Background()
		if deadline {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Minute)
			defer cancel()
		}
		t0 := time.Now()
		l, err := c.Obtain(ctx, key, time.Second, nil)
		if err != nil {
			t.Fatalf("Obtain(%q) = %v, want a lease", key, err)
		}
		t1 := time.Now()
		redistest.WaitFor(t, 10*time.Second, "a hold the clock can see", func() bool { return time.Since(l.Since()) >= time.Millisecond })
		t2 := time.Now()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release = %v", err)
		}
		t3 := time.Now()

		got := rec.Events()
		if len(got) != 2 || got[0].Type != event.Acquired || got[1].Type != event.Released {
			t.Fatalf("deadline %v: events %v, want acquired and released", deadline, got)
		}
		acq, rel := got[0], got[1]
		if acq.TS != l.Since().UnixNano() {
			t.Errorf("deadline %v: acquired TS = %d, want the lease's since %d", deadline, acq.TS, l.Since().UnixNano())
		}
		if max := t1.Sub(t0); acq.Wait <= 0 || acq.Wait > max {
			t.Errorf("deadline %v: acquired Wait = %v, want in (0, %v], the Obtain call", deadline, acq.Wait, max)
		}
		if rel.TS < t2.UnixNano() || rel.TS > t3.UnixNano() {
			t.Errorf("deadline %v: released TS = %d, want within the Release call [%d, %d]", deadline, rel.TS, t2.UnixNano(), t3.UnixNano())
		}
		if want := time.Duration(rel.TS - acq.TS); rel.Hold != want {
			t.Errorf("deadline %v: released Hold = %v, want its TS less the acquisition's, %v", deadline, rel.Hold, want)
		}
		if min, max := t2.Sub(l.Since()), t3.Sub(l.Since()); rel.Hold < min || rel.Hold > max {
			t.Errorf("deadline %v: released Hold = %v, want in [%v, %v]", deadline, rel.Hold, min, max)
		}
	}
}

// TestNoRecorderNoEvents checks a nil recorder is safe on every path.
func TestNoRecorderNoEvents(t *testing.T) {
	_, rdb, _, p := newClient(t, "")
	c := New(rdb, nil)
	ctx := context.Background()
	l := mustObtain(t, c, p+"k", time.Second, &ObtainOptions{AutoRenew: true, Fencing: true})
	if _, _, err := c.Try(ctx, p+"k", time.Second, nil); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Try = %v", err)
	}
	if err := l.Refresh(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	h, err := c.Inspect(ctx, p+"k")
	if err != nil || h.Owner != DefaultOwner() {
		t.Fatalf("Inspect = %+v, %v, want owner %q", h, err, DefaultOwner())
	}
	if _, err := c.ForceRelease(ctx, p+"k", h.Fingerprint, "op", "r"); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release after force = %v, want ErrNotHeld", err)
	}
}

// tee records to both recorders.
type tee [2]Recorder

func (t tee) Record(e event.Event) { t[0].Record(e); t[1].Record(e) }

// TestEventsReadBackFromStream runs a client through a real Emitter and
// decodes the stream: every event the client recorded arrives with every
// field, TTL at millisecond precision.
func TestEventsReadBackFromStream(t *testing.T) {
	_, rdb, _, p := newClient(t, "")
	ctx := context.Background()
	stream := p + "events"
	em := NewEmitter(rdb, &EmitterOptions{Stream: stream})
	rec := &eventrec.Recorder{}
	c := New(rdb, &Options{Owner: "svc/host/7", Recorder: tee{rec, em}})
	key := p + "k\n<b>"

	l := mustObtain(t, c, key, 1500*time.Millisecond, &ObtainOptions{Fencing: true})
	c.Try(ctx, key, time.Second, &ObtainOptions{Owner: "rival"})
	l.Refresh(ctx, 2*time.Second)
	l.Release(ctx)
	l.Release(ctx)
	l2 := mustObtain(t, c, key, time.Second, nil)
	h, _ := c.Inspect(ctx, key)
	c.ForceRelease(ctx, key, h.Fingerprint, "ops", "drill")
	l2.Refresh(ctx, time.Second) // lost
	if err := em.Close(ctx); err != nil {
		t.Fatal(err)
	}

	got := streamEvents(t, rdb, stream)
	want := rec.Events()
	// The second Release is a no-op without a round trip or an event.
	types := []event.Type{event.Acquired, event.Failed, event.Renewed, event.Released,
		event.Acquired, event.Forced, event.Lost}
	if len(want) != len(types) {
		t.Fatalf("recorded %d events, want %d", len(want), len(types))
	}
	for i, e := range want {
		if e.Type != types[i] {
			t.Errorf("event %d type %v, want %v", i, e.Type, types[i])
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events read back from the stream (-recorded +stream):\n%s", d)
	}
}

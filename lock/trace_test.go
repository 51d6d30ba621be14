package lock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// traceKey is the context key of the ids the test hook returns: the test's
// stand-in for an OpenTelemetry span (extra/lockotel's tests use a real one).
type traceKey struct{}

type ids struct {
	trace event.TraceID
	span  event.SpanID
}

func withIDs(ctx context.Context, n byte) (context.Context, ids) {
	v := ids{trace: event.TraceID{0: 0xa0, 15: n}, span: event.SpanID{0: 0xb0, 7: n}}
	return context.WithValue(ctx, traceKey{}, v), v
}

// testHook returns the ids withIDs put in ctx and counts its calls.
func testHook(calls *atomic.Int64) func(context.Context) (event.TraceID, event.SpanID) {
	return func(ctx context.Context) (event.TraceID, event.SpanID) {
		calls.Add(1)
		v, _ := ctx.Value(traceKey{}).(ids)
		return v.trace, v.span
	}
}

// TestTraceContextOnEveryEvent: each event of an obtain carries the ids of
// the obtain's context (waiting, acquired, failed), each event of a hold
// the ids of the context it was obtained in, whatever context Refresh and
// Release get and wherever the renewal runs; a forced release carries the
// operator call's. The hook runs once per call.
func TestTraceContextOnEveryEvent(t *testing.T) {
	_, rdb, rec, p := newClient(t, "")
	var calls atomic.Int64
	hook := testHook(&calls)
	a := New(rdb, &Options{Owner: "a", Recorder: rec, TraceContext: hook})
	b := New(rdb, &Options{Owner: "b", Recorder: rec, TraceContext: hook})
	key := p + "k"
	bg := context.Background()

	// a's hold, obtained under trace 1, renews itself and is released under
	// a context carrying trace 9.
	ctx1, t1 := withIDs(bg, 1)
	la, err := a.Obtain(ctx1, key, 3*time.Second, &ObtainOptions{AutoRenew: true}) // renewed every second: a loaded host keeps it
	if err != nil {
		t.Fatal(err)
	}
	// b waits for it under trace 2 and gives up; then tries under trace 3.
	ctx2, t2 := withIDs(bg, 2)
	wctx, cancel := context.WithTimeout(ctx2, 250*time.Millisecond)
	_, err = b.Obtain(wctx, key, time.Second, &ObtainOptions{Retry: LinearBackoff(20 * time.Millisecond)})
	cancel()
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Obtain of a held key = %v, want ErrNotObtained", err)
	}
	ctx3, t3 := withIDs(bg, 3)
	if _, _, err := b.Try(ctx3, key, time.Second, nil); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Try of a held key = %v, want ErrNotObtained", err)
	}
	redistest.WaitFor(t, 20*time.Second, "a renewal", func() bool { return len(rec.Of(event.Renewed)) > 0 })
	ctx9, _ := withIDs(bg, 9)
	if err := la.Refresh(ctx9, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx9); err != nil {
		t.Fatal(err)
	}

	// A Do under trace 4 whose hold an operator (trace 5) force-releases:
	// the loss and the release carry trace 4.
	ctx4, t4 := withIDs(bg, 4)
	ctx5, t5 := withIDs(bg, 5)
	err = a.Do(ctx4, key, 300*time.Millisecond, nil, func(ctx context.Context) error {
		h, err := a.Inspect(ctx, key)
		if err != nil {
			return err
		}
		if _, err := b.ForceRelease(ctx5, key, h.Fingerprint, "ops", "drill"); err != nil {
			return err
		}
		<-ctx.Done() // the renewal finds the lock gone
		return ctx.Err()
	})
	if !errors.Is(err, ErrLost) {
		t.Fatalf("Do whose lock was force-released = %v, want ErrLost", err)
	}

	want := map[event.Type][]ids{
		event.Acquired: {t1, t4},
		event.Waiting:  {t2},
		event.Failed:   {t2, t3},
		event.Released: {t1, t4},
		event.Lost:     {t4},
		event.Forced:   {t5},
	}
	for typ, w := range want {
		got := rec.Of(typ)
		if len(got) != len(w) {
			t.Errorf("%d %v events, want %d", len(got), typ, len(w))
			continue
		}
		for i, e := range got {
			if e.TraceID != w[i].trace || e.SpanID != w[i].span {
				t.Errorf("%v event %d carries %v/%v, want %v/%v", typ, i, e.TraceID, e.SpanID, w[i].trace, w[i].span)
			}
		}
	}
	renewed := rec.Of(event.Renewed)
	if len(renewed) < 2 {
		t.Fatalf("%d renewed events, want the auto-renewal's and the Refresh's", len(renewed))
	}
	for i, e := range renewed {
		if e.TraceID != t1.trace && e.TraceID != t4.trace {
			t.Errorf("renewed event %d carries trace %v, want its hold's (%v or %v)", i, e.TraceID, t1.trace, t4.trace)
		}
	}
	// a: 2 obtains; b: Obtain, Try and ForceRelease.
	if n := calls.Load(); n != 5 {
		t.Errorf("TraceContext called %d times, want 5 (once per call)", n)
	}
}

// TestTraceContextWithoutIDs: a hook that finds no span leaves the ids
// zero; without a recorder the hook is never called.
func TestTraceContextWithoutIDs(t *testing.T) {
	_, rdb, rec, p := newClient(t, "")
	var calls atomic.Int64
	c := New(rdb, &Options{Recorder: rec, TraceContext: testHook(&calls)})
	l := mustObtain(t, c, p+"k", time.Second, nil)
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs := rec.Events()
	for _, e := range evs {
		if e.TraceID.IsValid() || e.SpanID.IsValid() || e.HasExt() {
			t.Errorf("%v event carries %v/%v from a context without ids, want none", e.Type, e.TraceID, e.SpanID)
		}
	}
	if calls.Load() != 1 {
		t.Errorf("hook called %d times, want 1", calls.Load())
	}

	calls.Store(0)
	quiet := New(rdb, &Options{TraceContext: testHook(&calls)})
	ctx, _ := withIDs(context.Background(), 1)
	mustObtain(t, quiet, p+"q", time.Second, nil)
	if _, err := quiet.ForceRelease(ctx, p+"q", mustInspect(t, quiet, p+"q").Fingerprint, "ops", "r"); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("hook of a client without a recorder called %d times, want 0", n)
	}
}

func mustInspect(t *testing.T, c *Client, key string) *Holder {
	t.Helper()
	h, err := c.Inspect(context.Background(), key)
	if err != nil {
		t.Fatalf("Inspect(%q) = %v", key, err)
	}
	return h
}

// TestTraceIDsReadBackFromStream: the ids travel through a real Emitter's
// packed entries (their extension field) and decode as they were recorded.
func TestTraceIDsReadBackFromStream(t *testing.T) {
	_, rdb, _, p := newClient(t, "")
	bg := context.Background()
	stream := p + "events"
	em := NewEmitter(rdb, &EmitterOptions{Stream: stream})
	var calls atomic.Int64
	c := New(rdb, &Options{Owner: "svc", Recorder: em, TraceContext: testHook(&calls)})
	ctx, want := withIDs(bg, 7)
	l, err := c.Obtain(ctx, p+"k", time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Obtain(bg, p+"plain", time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if err := em.Close(bg); err != nil {
		t.Fatal(err)
	}
	got := streamEvents(t, rdb, stream)
	if len(got) != 3 {
		t.Fatalf("read %d events back, want 3", len(got))
	}
	for _, e := range got[:2] {
		if e.TraceID != want.trace || e.SpanID != want.span {
			t.Errorf("%v read back with %v/%v, want %v/%v", e.Type, e.TraceID, e.SpanID, want.trace, want.span)
		}
	}
	if got[2].TraceID.IsValid() || got[2].SpanID.IsValid() {
		t.Errorf("event of a context without ids read back with %v/%v, want none", got[2].TraceID, got[2].SpanID)
	}
}

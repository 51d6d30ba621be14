package lockotel_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/event/class"
	lockotel "github.com/lockscope/lockscope/extra/lockotel"
	"github.com/lockscope/lockscope/internal/testkit/eventrec"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// tracing is a tracer provider whose ended spans the test reads, as an
// application's would be exported.
type tracing struct {
	tp    *sdktrace.TracerProvider
	spans *tracetest.SpanRecorder
}

func newTracing(t *testing.T, sampler sdktrace.Sampler) tracing {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tracing{tp: tp, spans: sr}
}

// span starts the caller's span, as a request handler's would be.
func (tr tracing) span(ctx context.Context, name string) (context.Context, trace.Span) {
	return tr.tp.Tracer("app").Start(ctx, name)
}

// named returns the ended spans called name.
func (tr tracing) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tr.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// byLease returns the one span called name whose lease attribute is lease.
func (tr tracing) byLease(t *testing.T, name, lease string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range tr.named(name) {
		if attr(s, lockotel.AttrLease).AsString() == lease {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s spans of lease %q, want 1 (ended spans: %v)", len(found), name, lease, names(tr.spans.Ended()))
	}
	return found[0]
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// childOf checks s is a child of the caller's span.
func childOf(t *testing.T, s sdktrace.ReadOnlySpan, caller trace.Span) {
	t.Helper()
	want := caller.SpanContext()
	if s.Parent().TraceID() != want.TraceID() || s.Parent().SpanID() != want.SpanID() || s.SpanContext().TraceID() != want.TraceID() {
		t.Errorf("%s span's parent %v/%v in trace %v, want the caller's span %v/%v", s.Name(),
			s.Parent().TraceID(), s.Parent().SpanID(), s.SpanContext().TraceID(), want.TraceID(), want.SpanID())
	}
}

func TestTraceContext(t *testing.T) {
	tr := newTracing(t, sdktrace.AlwaysSample())
	ctx, span := tr.span(context.Background(), "request")
	defer span.End()
	sc := span.SpanContext()
	gotT, gotS := lockotel.TraceContext(ctx)
	if gotT != event.TraceID(sc.TraceID()) || gotS != event.SpanID(sc.SpanID()) {
		t.Errorf("TraceContext(sampled span) = %v/%v, want %v/%v", gotT, gotS, sc.TraceID(), sc.SpanID())
	}
	if gotT, gotS := lockotel.TraceContext(context.Background()); gotT.IsValid() || gotS.IsValid() {
		t.Errorf("TraceContext(no span) = %v/%v, want zero ids", gotT, gotS)
	}
	never := newTracing(t, sdktrace.NeverSample())
	uctx, uspan := never.span(context.Background(), "unsampled")
	defer uspan.End()
	if !uspan.SpanContext().IsValid() {
		t.Fatal("the unsampled span has no ids: the test proves nothing")
	}
	if gotT, gotS := lockotel.TraceContext(uctx); gotT.IsValid() || gotS.IsValid() {
		t.Errorf("TraceContext(unsampled span %v) = %v/%v, want zero ids: its trace is kept nowhere", uspan.SpanContext().TraceID(), gotT, gotS)
	}
}

// setup returns two clients of the shared server recording through one
// lockotel.Recorder into events, and a key prefix.
func setup(t *testing.T, tr tracing, opt *lockotel.Options, hooks ...redis.Hook) (a, b *lock.Client, events *eventrec.Recorder, prefix string) {
	t.Helper()
	rdb := redistest.Shared(t).Client(t)
	for _, h := range hooks {
		rdb.AddHook(h)
	}
	events = &eventrec.Recorder{}
	o := lockotel.Options{TracerProvider: tr.tp}
	if opt != nil {
		o = *opt
		o.TracerProvider = tr.tp
	}
	rec := lockotel.NewRecorder(events, &o)
	a = lock.New(rdb, &lock.Options{Owner: "checkout-a", Recorder: rec, TraceContext: lockotel.TraceContext})
	b = lock.New(rdb, &lock.Options{Owner: "checkout-b", Recorder: rec, TraceContext: lockotel.TraceContext})
	return a, b, events, redistest.KeyPrefix(t)
}

// A wait and the hold it waited for, against a real Redis: the waiter's
// wait span names the key, its class, the holder it waited for, the lease
// and the outcome, as a child of the waiter's own span; each hold is a
// span of the holder's trace; the events carry the callers' ids.
func TestWaitAndHoldSpans(t *testing.T) {
	tr := newTracing(t, sdktrace.AlwaysSample())
	sets := &redistest.Commands{Name: "set"} // b's attempts, once a holds key
	a, b, events, p := setup(t, tr, nil, sets)
	key := p + "inventory:sku-1"
	sets.Key = key
	bg := context.Background()

	actx, aspan := tr.span(bg, "reserve a")
	la, err := a.Obtain(actx, key, 10*time.Second, &lock.ObtainOptions{AutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	bctx, bspan := tr.span(bg, "reserve b")
	got := make(chan *lock.Lease, 1)
	go func() {
		wctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		lb, err := b.Obtain(wctx, key, 10*time.Second, &lock.ObtainOptions{Retry: lock.LinearBackoff(5 * time.Millisecond)})
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	waitFor(t, "b's waiting event", func() bool { return count(events, event.Waiting) == 1 })
	// b began to wait before seen and retries while a holds the lock: four
	// SETs are a's obtain, b's first attempt and two retries.
	seen := time.Now()
	waitFor(t, "b's retries", func() bool { return sets.N() >= 4 })
	held := time.Since(seen) // b waits at least this long
	if err := la.Release(bg); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		t.FailNow()
	}
	if err := lb.Release(bg); err != nil {
		t.Fatal(err)
	}
	aspan.End()
	bspan.End()

	wait := tr.byLease(t, lockotel.WaitSpan, lb.ID())
	childOf(t, wait, bspan)
	wantAttrs := map[attribute.Key]string{
		lockotel.AttrKey:     key,
		lockotel.AttrClass:   class.Default(key),
		lockotel.AttrOwner:   "checkout-b",
		lockotel.AttrHolder:  "checkout-a",
		lockotel.AttrOutcome: lockotel.OutcomeAcquired,
	}
	for k, v := range wantAttrs {
		if got := attr(wait, k).AsString(); got != v {
			t.Errorf("wait span %s = %q, want %q", k, got, v)
		}
	}
	if n := attr(wait, lockotel.AttrAttempts).AsInt64(); n < 2 {
		t.Errorf("wait span attempts = %d, want the retries it made (>= 2)", n)
	}
	if d := wait.EndTime().Sub(wait.StartTime()); d < held || d > 10*time.Second {
		t.Errorf("wait span lasts %v, want at least the %v a held the lock after b began to wait", d, held)
	}
	if wait.Status().Code != codes.Unset {
		t.Errorf("wait span status = %v, want unset for an acquisition", wait.Status())
	}

	// The uncontended obtain is a wait span of one round trip, no holder.
	await := tr.byLease(t, lockotel.WaitSpan, la.ID())
	childOf(t, await, aspan)
	if h := attr(await, lockotel.AttrHolder); h.Type() != attribute.EMPTY {
		t.Errorf("uncontended wait span holder = %v, want none", h.String())
	}

	for _, c := range []struct {
		lease  string
		caller trace.Span
	}{{la.ID(), aspan}, {lb.ID(), bspan}} {
		hold := tr.byLease(t, lockotel.HoldSpan, c.lease)
		childOf(t, hold, c.caller)
		if got := attr(hold, lockotel.AttrOutcome).AsString(); got != lockotel.OutcomeReleased {
			t.Errorf("hold span outcome = %q, want released", got)
		}
		if got := attr(hold, lockotel.AttrTTL).AsFloat64(); got != 10 {
			t.Errorf("hold span ttl = %v, want 10 (seconds)", got)
		}
	}
	if hold := tr.byLease(t, lockotel.HoldSpan, la.ID()); hold.EndTime().Sub(hold.StartTime()) < held {
		t.Errorf("a's hold span lasts %v, want at least %v", hold.EndTime().Sub(hold.StartTime()), held)
	}

	// Every event went on to the next recorder with its caller's ids.
	for _, e := range events.Events() {
		want := aspan.SpanContext()
		if e.Owner == "checkout-b" {
			want = bspan.SpanContext()
		}
		if e.TraceID != event.TraceID(want.TraceID()) || e.SpanID != event.SpanID(want.SpanID()) {
			t.Errorf("%v event of %s carries %v/%v, want its caller's %v/%v", e.Type, e.Owner, e.TraceID, e.SpanID, want.TraceID(), want.SpanID())
		}
	}
}

// Failed obtains: a refused try is a wait span with outcome held and no
// error; a wait that times out is an error naming the holder. Calls whose
// context has no span, or an unsampled one, make no span.
func TestFailedWaitsAndUntracedCalls(t *testing.T) {
	tr := newTracing(t, sdktrace.AlwaysSample())
	a, b, events, p := setup(t, tr, nil)
	key := p + "payment:77"
	bg := context.Background()
	la, err := a.Obtain(bg, key, 10*time.Second, nil) // untraced
	if err != nil {
		t.Fatal(err)
	}
	defer la.Release(bg)

	ctx, span := tr.span(bg, "submit")
	if _, _, err := b.Try(ctx, key, time.Second, nil); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Try = %v, want ErrNotObtained", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // room for the first attempt on a loaded host
	_, err = b.Obtain(wctx, key, time.Second, &lock.ObtainOptions{Retry: lock.LinearBackoff(10 * time.Millisecond)})
	cancel()
	if !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Obtain = %v, want ErrNotObtained", err)
	}
	never := newTracing(t, sdktrace.NeverSample())
	uctx, uspan := never.span(bg, "unsampled")
	b.Try(uctx, key, time.Second, nil)
	uspan.End()
	span.End()

	waits := tr.named(lockotel.WaitSpan)
	if len(waits) != 2 {
		t.Fatalf("%d wait spans, want 2 (the traced try and obtain; none for untraced or unsampled calls)", len(waits))
	}
	if n := len(tr.named(lockotel.HoldSpan)); n != 0 {
		t.Errorf("%d hold spans, want 0: the only hold is untraced", n)
	}
	try, timeout := waits[0], waits[1]
	for _, c := range []struct {
		s       sdktrace.ReadOnlySpan
		outcome string
		code    codes.Code
	}{{try, event.ReasonHeld, codes.Unset}, {timeout, event.ReasonTimeout, codes.Error}} {
		childOf(t, c.s, span)
		if got := attr(c.s, lockotel.AttrOutcome).AsString(); got != c.outcome {
			t.Errorf("wait span outcome = %q, want %q", got, c.outcome)
		}
		if got := attr(c.s, lockotel.AttrHolder).AsString(); got != "checkout-a" {
			t.Errorf("%s wait span holder = %q, want checkout-a", c.outcome, got)
		}
		if c.s.Status().Code != c.code {
			t.Errorf("%s wait span status %v, want %v", c.outcome, c.s.Status().Code, c.code)
		}
	}
	if d := timeout.EndTime().Sub(timeout.StartTime()); d < 250*time.Millisecond {
		t.Errorf("timed-out wait span lasts %v, want about its 500ms deadline", d)
	}
	var types []event.Type
	for _, e := range events.Events() {
		types = append(types, e.Type)
	}
	if want := []event.Type{event.Acquired, event.Failed, event.Waiting, event.Failed, event.Failed}; !slices.Equal(types, want) {
		t.Errorf("events passed on: %v, want every one: %v", types, want)
	}
}

// A hold's end: lost when another owner took the lock, forced when the
// operator's release went through the same Recorder, expired when a lease
// without renewal lapsed and nothing ended it (found by the next hold's
// sweep); MaxOpen bounds the open holds.
func TestHoldEnds(t *testing.T) {
	tr := newTracing(t, sdktrace.AlwaysSample())
	a, b, _, p := setup(t, tr, &lockotel.Options{MaxOpen: 1, Class: func(string) string { return "custom" }})
	bg := context.Background()
	ctx, span := tr.span(bg, "job")
	defer span.End()

	// Forced: b (the operator) force-releases a's lock, through the same
	// recorder; a's renewal then finds it lost, which ends nothing more.
	k1 := p + "export:1"
	var lease1 string
	err := a.Do(ctx, k1, time.Second, nil, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		lease1 = l.ID()
		h, err := b.Inspect(ctx, k1)
		if err != nil {
			return err
		}
		if _, err := b.ForceRelease(bg, k1, h.Fingerprint, "ops", "stuck"); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Do = %v, want ErrLost", err)
	}
	forced := tr.byLease(t, lockotel.HoldSpan, lease1)
	if got := attr(forced, lockotel.AttrOutcome).AsString(); got != lockotel.OutcomeForced || forced.Status().Code != codes.Error {
		t.Errorf("force-released hold span outcome %q status %v, want forced, error", got, forced.Status().Code)
	}
	if got := attr(forced, lockotel.AttrClass).AsString(); got != "custom" {
		t.Errorf("class = %q, want Options.Class's", got)
	}

	// Lost: the key is deleted under a renewing lease.
	k2 := p + "export:2"
	rdb := redistest.Shared(t).Client(t)
	l2, err := a.Obtain(ctx, k2, time.Second, &lock.ObtainOptions{AutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(bg, k2)
	<-l2.Done()
	lost := tr.byLease(t, lockotel.HoldSpan, l2.ID())
	if got, reason := attr(lost, lockotel.AttrOutcome).AsString(), attr(lost, lockotel.AttrReason).AsString(); got != lockotel.OutcomeLost || reason != event.ReasonNotOwner {
		t.Errorf("lost hold span outcome %q reason %q, want lost, not_owner", got, reason)
	}
	l2.Release(bg)

	// Expired: a lease without renewal, never released. With MaxOpen 1 it
	// fills the recorder: the next hold's span is made once the sweep
	// finds it lapsed, and a hold while one is open gets none.
	k3 := p + "report:3"
	l3, err := a.Obtain(ctx, k3, 50*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-l3.Done() // lapsed: the lease knows, and sends no event
	k4 := p + "report:4"
	l4, err := a.Obtain(ctx, k4, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	expired := tr.byLease(t, lockotel.HoldSpan, l3.ID())
	if got := attr(expired, lockotel.AttrOutcome).AsString(); got != lockotel.OutcomeExpired {
		t.Errorf("lapsed hold span outcome %q, want expired", got)
	}
	if d := expired.EndTime().Sub(expired.StartTime()); d != 50*time.Millisecond {
		t.Errorf("lapsed hold span lasts %v, want its TTL, 50ms", d)
	}
	l5, err := b.Obtain(ctx, p+"report:5", 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	l5.Release(bg)
	l4.Release(bg)
	tr.byLease(t, lockotel.HoldSpan, l4.ID())
	for _, s := range tr.named(lockotel.HoldSpan) {
		if attr(s, lockotel.AttrLease).AsString() == l5.ID() {
			t.Errorf("a hold begun while MaxOpen (1) holds were open got a span, want none")
		}
	}
	if n := len(tr.named(lockotel.WaitSpan)); n != 5 {
		t.Errorf("%d wait spans, want 5: waits are not bounded by open holds", n)
	}
}

func count(r *eventrec.Recorder, typ event.Type) int {
	n := 0
	for _, e := range r.Events() {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.WaitFor(t, 15*time.Second, what, cond)
}

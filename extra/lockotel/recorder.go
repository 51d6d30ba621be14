package lockotel

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/event/class"
	"github.com/lockscope/lockscope/lock"
)

// Span names.
const (
	// WaitSpan is the span of one obtain (Obtain, Try, Do): from its first
	// attempt to its acquisition or failure. An uncontended obtain's span
	// lasts one round trip.
	WaitSpan = "lockscope.wait"
	// HoldSpan is the span of one hold: from the acquisition to the release
	// or loss. Renewals are span events on it (renewed, renew_failed).
	HoldSpan = "lockscope.hold"
)

// Attributes of the spans.
const (
	AttrKey      = attribute.Key("lockscope.key")      // the lock key
	AttrClass    = attribute.Key("lockscope.class")    // its class (see Options.Class)
	AttrOwner    = attribute.Key("lockscope.owner")    // who waited or held
	AttrHolder   = attribute.Key("lockscope.holder")   // wait: who held the lock when the wait began (or when it gave up)
	AttrLease    = attribute.Key("lockscope.lease")    // the public lease id: the same on the wait, the hold and the dashboard
	AttrOutcome  = attribute.Key("lockscope.outcome")  // see the Outcome constants
	AttrReason   = attribute.Key("lockscope.reason")   // hold lost: not_owner, max_hold or error
	AttrAttempts = attribute.Key("lockscope.attempts") // wait: tries made
	AttrTTL      = attribute.Key("lockscope.ttl")      // seconds: the TTL set (wait, hold; renewed events)
	AttrFence    = attribute.Key("lockscope.fence")    // the fencing token, when fencing is on
	AttrDegraded = attribute.Key("lockscope.degraded") // a process-local lease, Redis unreachable
)

// Outcomes (AttrOutcome). A wait ends acquired or with the failure's reason
// (event.ReasonTimeout, ReasonCanceled, ReasonError, ReasonHeld); a hold
// ends released, not_owner (its release found the lock gone), lost, forced
// or expired (no release came and its TTL lapsed).
const (
	OutcomeAcquired = "acquired"
	OutcomeReleased = "released"
	OutcomeNotOwner = event.ReasonNotOwner
	OutcomeLost     = "lost"
	OutcomeForced   = "forced"
	OutcomeExpired  = "expired"
)

// Options configures a Recorder. A nil *Options is the zero value.
type Options struct {
	// TracerProvider makes the spans; nil means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Class returns a key's lock class for AttrClass ("" leaves it out);
	// nil means the collector's default derivation (class.Default:
	// workflow:123 is workflow:*). The collector's --class rules and its
	// class limit are not known here: set Class to apply the same rules.
	Class func(key string) string
	// MaxOpen bounds the holds (and, apart, the waits) the Recorder keeps
	// open, about 200 bytes each; past it a new one gets no span. 0 means
	// 10 000.
	MaxOpen int
}

// Recorder is a lock.Recorder that passes every event to the next recorder
// and makes spans of the events of traced calls: those whose ids came from
// a sampled span (TraceContext). It must see every event of the client it
// records for, as the step happens (as lock.Client calls it). Safe for
// concurrent use; Record never blocks beyond a short mutex and what the
// tracer provider's span processor does (a batching one only enqueues).
type Recorder struct {
	next    lock.Recorder
	tracer  trace.Tracer
	class   func(string) string
	maxOpen int

	mu      sync.Mutex
	holders map[string]string // lease → the holder its waiting event saw
	holds   map[string]*hold  // lease → its open hold span
	sweepAt int               // sweep lapsed holds when holds grows past this
}

// hold is an open hold span.
type hold struct {
	span  trace.Span
	until time.Time // the lock's latest possible expiry: last acquisition or renewal + its TTL; zero without a TTL
}

var _ lock.Recorder = (*Recorder)(nil)

// NewRecorder returns a Recorder passing events on to next (nil: spans
// only). opt may be nil.
func NewRecorder(next lock.Recorder, opt *Options) *Recorder {
	var o Options
	if opt != nil {
		o = *opt
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.Class == nil {
		o.Class = class.Default
	}
	if o.MaxOpen <= 0 {
		o.MaxOpen = 10_000
	}
	return &Recorder{
		next:    next,
		tracer:  o.TracerProvider.Tracer("github.com/lockscope/lockscope/extra/lockotel"),
		class:   o.Class,
		maxOpen: o.MaxOpen,
		holders: make(map[string]string),
		holds:   make(map[string]*hold),
		sweepAt: 64,
	}
}

// Record passes e on, then adds what it says to the spans.
func (r *Recorder) Record(e event.Event) {
	if r.next != nil {
		r.next.Record(e)
	}
	now := time.Now()
	traced := e.TraceID.IsValid() && e.SpanID.IsValid()
	switch e.Type {
	case event.Waiting:
		if traced && e.Lease != "" {
			r.mu.Lock()
			if len(r.holders) < r.maxOpen {
				r.holders[e.Lease] = e.Holder
			}
			r.mu.Unlock()
		}
	case event.Acquired, event.Failed:
		holder := e.Holder
		if e.Lease != "" {
			r.mu.Lock()
			if h, ok := r.holders[e.Lease]; ok {
				delete(r.holders, e.Lease)
				if holder == "" {
					holder = h
				}
			}
			r.mu.Unlock()
		}
		if !traced {
			return
		}
		r.wait(&e, holder, now)
		if e.Type == event.Acquired && e.Lease != "" {
			r.beginHold(&e)
		}
	case event.Renewed, event.RenewFailed:
		r.mu.Lock()
		h := r.holds[e.Lease]
		if h != nil && e.Type == event.Renewed && e.TTL > 0 {
			h.until = time.Unix(0, e.TS).Add(e.TTL)
		}
		r.mu.Unlock()
		if h == nil {
			return
		}
		at := trace.WithTimestamp(time.Unix(0, e.TS))
		if e.Type == event.Renewed {
			h.span.AddEvent("renewed", at, trace.WithAttributes(AttrTTL.Float64(e.TTL.Seconds())))
		} else {
			h.span.AddEvent("renew_failed", at, trace.WithAttributes(AttrReason.String(e.Reason)))
		}
	case event.Released, event.Lost, event.Forced:
		r.mu.Lock()
		h := r.holds[e.Lease]
		delete(r.holds, e.Lease)
		r.mu.Unlock()
		if h != nil {
			endHold(h.span, &e)
		}
	}
}

func parent(e *event.Event) context.Context {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID(e.TraceID),
		SpanID:     trace.SpanID(e.SpanID),
		TraceFlags: trace.FlagsSampled, // TraceContext passes only sampled spans' ids
	})
	return trace.ContextWithSpanContext(context.Background(), sc)
}

func (r *Recorder) common(e *event.Event) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, AttrKey.String(e.Key))
	if c := r.class(e.Key); c != "" {
		attrs = append(attrs, AttrClass.String(c))
	}
	attrs = append(attrs, AttrOwner.String(e.Owner), AttrLease.String(e.Lease))
	if e.Fence != 0 {
		attrs = append(attrs, AttrFence.Int64(e.Fence))
	}
	if e.Degraded {
		attrs = append(attrs, AttrDegraded.Bool(true))
	}
	return attrs
}

// wait makes the span of an obtain that ended now (acquired or failed),
// e.Wait long.
func (r *Recorder) wait(e *event.Event, holder string, now time.Time) {
	attrs := r.common(e)
	outcome := OutcomeAcquired
	if e.Type == event.Failed {
		outcome = e.Reason
	}
	attrs = append(attrs, AttrOutcome.String(outcome), AttrAttempts.Int(e.Attempts))
	if holder != "" {
		attrs = append(attrs, AttrHolder.String(holder))
	}
	if e.TTL > 0 {
		attrs = append(attrs, AttrTTL.Float64(e.TTL.Seconds()))
	}
	_, span := r.tracer.Start(parent(e), WaitSpan, trace.WithTimestamp(now.Add(-max(e.Wait, 0))),
		trace.WithAttributes(attrs...))
	if outcome == event.ReasonTimeout || outcome == event.ReasonError {
		// A caller that wanted the lock and did not get it; a refused
		// Try (held) or a cancelled wait is the caller's choice.
		span.SetStatus(codes.Error, "lock not obtained: "+outcome)
	}
	span.End(trace.WithTimestamp(now))
}

// beginHold opens the span of the hold an acquisition began.
func (r *Recorder) beginHold(e *event.Event) {
	since := time.Unix(0, e.TS)
	h := &hold{}
	if e.TTL > 0 {
		h.until = since.Add(e.TTL)
	}
	r.mu.Lock()
	if _, dup := r.holds[e.Lease]; dup {
		r.mu.Unlock()
		return
	}
	lapsed := r.sweepLocked(since)
	if len(r.holds) >= r.maxOpen {
		r.mu.Unlock()
		endLapsed(lapsed)
		return
	}
	attrs := r.common(e)
	if e.TTL > 0 {
		attrs = append(attrs, AttrTTL.Float64(e.TTL.Seconds()))
	}
	_, h.span = r.tracer.Start(parent(e), HoldSpan, trace.WithTimestamp(since), trace.WithAttributes(attrs...))
	r.holds[e.Lease] = h
	r.mu.Unlock()
	endLapsed(lapsed)
}

// sweepLocked removes the holds whose TTL lapsed before now without a
// renewal and returns them, once the open holds have doubled since the
// last sweep (a lease without auto-renewal that is never released ends
// with no event). r.mu is held.
func (r *Recorder) sweepLocked(now time.Time) []*hold {
	if len(r.holds) < r.sweepAt && len(r.holds) < r.maxOpen {
		return nil
	}
	var out []*hold
	for lease, h := range r.holds {
		if !h.until.IsZero() && h.until.Before(now) {
			delete(r.holds, lease)
			out = append(out, h)
		}
	}
	r.sweepAt = max(64, 2*len(r.holds))
	return out
}

// endLapsed ends the spans of holds whose TTL lapsed, at their expiry.
func endLapsed(hs []*hold) {
	for _, h := range hs {
		h.span.SetAttributes(AttrOutcome.String(OutcomeExpired))
		h.span.SetStatus(codes.Error, "no release or renewal before the lock's TTL lapsed")
		h.span.End(trace.WithTimestamp(h.until))
	}
}

// endHold ends a hold's span with what its end event says.
func endHold(span trace.Span, e *event.Event) {
	switch {
	case e.Type == event.Forced:
		span.SetAttributes(AttrOutcome.String(OutcomeForced))
		span.SetStatus(codes.Error, "released by an operator")
	case e.Type == event.Lost:
		span.SetAttributes(AttrOutcome.String(OutcomeLost), AttrReason.String(e.Reason))
		span.SetStatus(codes.Error, "lock lost: "+e.Reason)
	case e.Reason == event.ReasonNotOwner:
		span.SetAttributes(AttrOutcome.String(OutcomeNotOwner))
		span.SetStatus(codes.Error, "the lock was no longer this lease's at release")
	default:
		span.SetAttributes(AttrOutcome.String(OutcomeReleased))
	}
	span.End(trace.WithTimestamp(time.Unix(0, e.TS)))
}

package workload

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	"github.com/lockscope/lockscope/event"
)

// The simulated work runs inside spans: each request (a cron replica's
// tick, a payment click, an editing session, a reservation, a job) gets a
// trace id and a span id of its own in its context, and the simulator's
// clients read them through lock.Options.TraceContext, as an application's
// read its OpenTelemetry spans through extra/lockotel. So the demo shows trace
// ids and exemplars without any setup. The ids are W3C Trace Context ids
// made here: the binary carries no OpenTelemetry SDK, nothing is exported,
// and a tracing backend knows none of them. A lock call made inside
// another's hold (the deadlock's second lock) stays in its request's trace.

type spanKey struct{}

type span struct {
	trace event.TraceID
	id    event.SpanID
}

// inSpan returns ctx inside a new request's span, unless it is in one.
func inSpan(ctx context.Context) context.Context {
	if _, ok := ctx.Value(spanKey{}).(span); ok {
		return ctx
	}
	var sp span
	for !sp.trace.IsValid() || !sp.id.IsValid() { // all-zero ids are invalid: draw again
		binary.BigEndian.PutUint64(sp.trace[:8], rand.Uint64())
		binary.BigEndian.PutUint64(sp.trace[8:], rand.Uint64())
		binary.BigEndian.PutUint64(sp.id[:], rand.Uint64())
	}
	return context.WithValue(ctx, spanKey{}, sp)
}

// traceContext is the simulator's lock.Options.TraceContext.
func traceContext(ctx context.Context) (event.TraceID, event.SpanID) {
	sp, _ := ctx.Value(spanKey{}).(span)
	return sp.trace, sp.id
}

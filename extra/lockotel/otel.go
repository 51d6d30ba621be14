// Package lockotel is lockscope's OpenTelemetry glue (import path
// github.com/lockscope/lockscope/extra/lockotel): it links a lock's waits and
// holds to the traces of the calls that waited and held.
//
//   - TraceContext is the hook of lock.Options.TraceContext: the lock's
//     events then carry the trace and span id of the caller's span, so the
//     collector shows them on the dashboard and attaches them as exemplars
//     to lockscope_wait_seconds and lockscope_hold_seconds.
//   - Recorder is a lock.Recorder that passes every event on (to the
//     Emitter, usually) and turns the events of traced calls into spans: one
//     lockscope.wait span per obtain, one lockscope.hold span per hold, each a
//     child of the caller's span.
//
// Wiring both:
//
//	events := lock.NewEmitter(rdb, nil)
//	client := lock.New(rdb, &lock.Options{
//		Recorder:     lockotel.NewRecorder(events, nil), // spans from otel.GetTracerProvider()
//		TraceContext: lockotel.TraceContext,
//	})
//
// No OpenTelemetry semantic convention for locks exists yet, so the spans'
// attributes are lockscope's own (see the Attr constants).
package lockotel

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/lockscope/lockscope/event"
)

// TraceContext returns the trace and span id of the span ctx carries, or
// zero ids when it carries none or its span is not sampled: an unsampled
// trace is kept by no backend, so its id would be a link to nothing (on the
// dashboard, in an exemplar). It is lock.Options.TraceContext's hook.
func TraceContext(ctx context.Context) (event.TraceID, event.SpanID) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return event.TraceID{}, event.SpanID{}
	}
	return event.TraceID(sc.TraceID()), event.SpanID(sc.SpanID())
}

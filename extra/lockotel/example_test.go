package lockotel_test

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	lockotel "github.com/lockscope/lockscope/extra/lockotel"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// exampleRedis starts a private redis-server for an example. In your code:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
var exampleRedis = redistest.ExampleClient

// A request handler takes a lock inside its span: the lock's events carry
// the span's trace (the dashboard links it, the collector's histograms keep
// it as an exemplar) and the wait and the hold become spans of the trace.
func Example() {
	rdb, done := exampleRedis()
	defer done()
	spans := tracetest.NewInMemoryExporter() // in your code: your exporter (OTLP, ...)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	ctx := context.Background()

	events := lock.NewEmitter(rdb, nil)
	client := lock.New(rdb, &lock.Options{
		Owner:        "checkout",
		Recorder:     lockotel.NewRecorder(events, &lockotel.Options{TracerProvider: tp}),
		TraceContext: lockotel.TraceContext,
	})

	ctx, request := tp.Tracer("shop").Start(ctx, "POST /orders")
	err := client.Do(ctx, "inventory:sku-1", 10*time.Second, nil, func(ctx context.Context) error {
		return nil // reserve the stock
	})
	request.End()
	fmt.Println("err:", err)

	for _, s := range spans.GetSpans() {
		fmt.Print(s.Name)
		for _, kv := range s.Attributes {
			if kv.Key != lockotel.AttrLease {
				fmt.Printf(" %s=%s", kv.Key, kv.Value.String())
			}
		}
		fmt.Println(" same trace:", s.SpanContext.TraceID() == request.SpanContext().TraceID())
	}
	events.Close(ctx)
	// Output:
	// err: <nil>
	// lockscope.wait lockscope.key=inventory:sku-1 lockscope.class=inventory:sku-* lockscope.owner=checkout lockscope.outcome=acquired lockscope.attempts=1 lockscope.ttl=10 same trace: true
	// lockscope.hold lockscope.key=inventory:sku-1 lockscope.class=inventory:sku-* lockscope.owner=checkout lockscope.ttl=10 lockscope.outcome=released same trace: true
	// POST /orders same trace: true
}

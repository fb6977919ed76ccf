package leaseotel_test

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasehold/leasehold/backend/memory"
	leaseotel "github.com/leasehold/leasehold/otel"
	"github.com/leasehold/leasehold/primitives"
)

// A Mutex whose leases are recorded by an OpenTelemetry SDK: here one that keeps its metrics
// until read and its spans in memory; in production the global providers, with exporters. The
// lock's spans are children of the request's span, the one in the ctx passed to Do (or to
// Acquire, TryAcquire and Release).
func ExampleNew() {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	tel, err := leaseotel.New(
		leaseotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		leaseotel.WithTracerProvider(tp),
		leaseotel.WithKeyAttribute(func(key string) string { // "invoice:1234" is recorded as "invoice"
			prefix, _, _ := strings.Cut(key, ":")
			return prefix
		}),
	)
	if err != nil {
		panic(err)
	}
	mu, err := primitives.NewMutex(memory.New(), "invoice:1234", tel.Option())
	if err != nil {
		panic(err)
	}

	// The request's span, as an HTTP server's middleware would start it.
	ctx, request := tp.Tracer("app").Start(context.Background(), "POST /invoices/1234/pay")
	mu.Do(ctx, func(ctx context.Context, lease primitives.Lease) error {
		mu.TryAcquire(ctx) // refused: the mutex is held
		return nil
	})
	request.End()

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch data := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range data.DataPoints {
				lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
			}
		case metricdata.Histogram[float64]:
			for _, p := range data.DataPoints {
				lines = append(lines, fmt.Sprintf("%s{%s} count %d (%s)", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Count, m.Unit))
			}
		}
	}
	slices.Sort(lines) // points come in no particular order
	fmt.Println(strings.Join(lines, "\n"))

	// The trace, as a tree: each span under its parent.
	stubs := spans.GetSpans()
	var print func(parent string, depth int)
	print = func(parent string, depth int) {
		for _, s := range stubs {
			if s.Parent.SpanID().String() == parent {
				fmt.Printf("%s%s\n", strings.Repeat("  ", depth), s.Name)
				print(s.SpanContext.SpanID().String(), depth+1)
			}
		}
	}
	print("0000000000000000", 0) // the root: no parent
	// Output:
	// leasehold.lease.active{leasehold.key=invoice} 0
	// leasehold.lease.events{leasehold.key=invoice,leasehold.outcome=acquired} 1
	// leasehold.lease.events{leasehold.key=invoice,leasehold.outcome=refused} 1
	// leasehold.lease.events{leasehold.key=invoice,leasehold.outcome=released} 1
	// leasehold.lease.hold.duration{leasehold.key=invoice,leasehold.outcome=released} count 1 (s)
	// leasehold.lease.wait.duration{leasehold.key=invoice,leasehold.outcome=acquired} count 1 (s)
	// leasehold.lease.wait.duration{leasehold.key=invoice,leasehold.outcome=refused} count 1 (s)
	// POST /invoices/1234/pay
	//   leasehold.acquire
	//   leasehold.acquire
	//   leasehold.hold
}

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
// until read and its spans in memory; in production the global providers, with exporters.
func ExampleNew() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewInMemoryExporter()
	tel, err := leaseotel.New(
		leaseotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		leaseotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))),
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
	lease, _ := mu.Acquire(ctx)
	mu.TryAcquire(ctx) // refused: the mutex is held
	lease.Release(ctx)

	var rm metricdata.ResourceMetrics
	reader.Collect(ctx, &rm)
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
	for _, s := range spans.GetSpans() {
		fmt.Println("span", s.Name)
	}
	// Output:
	// leasehold.lease.events{leasehold.key=invoice,leasehold.outcome=acquired} 1
	// leasehold.lease.events{leasehold.key=invoice,leasehold.outcome=refused} 1
	// leasehold.lease.events{leasehold.key=invoice,leasehold.outcome=released} 1
	// leasehold.lease.held{leasehold.key=invoice,leasehold.outcome=released} count 1 (s)
	// leasehold.lease.wait{leasehold.key=invoice,leasehold.outcome=acquired} count 1 (s)
	// leasehold.lease.wait{leasehold.key=invoice,leasehold.outcome=refused} count 1 (s)
	// span leasehold.acquire
	// span leasehold.acquire
	// span leasehold.hold
}

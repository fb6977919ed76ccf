package leaseotel_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	leaseotel "github.com/leasehold/leasehold/otel"
)

// recorder is a Telemetry over an SDK MeterProvider with a ManualReader and a TracerProvider
// that hands every span, as it ends, to an in-memory exporter.
type recorder struct {
	tel    *leaseotel.Telemetry
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
}

func newRecorder(t *testing.T, opts ...leaseotel.Option) *recorder {
	t.Helper()
	r := &recorder{reader: sdkmetric.NewManualReader(), spans: tracetest.NewInMemoryExporter()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	r.tp = tp
	t.Cleanup(func() {
		mp.Shutdown(context.Background())
		tp.Shutdown(context.Background())
	})
	tel, err := leaseotel.New(append([]leaseotel.Option{leaseotel.WithMeterProvider(mp), leaseotel.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	r.tel = tel
	return r
}

// instruments collects the metrics and returns them by instrument name.
func (r *recorder) instruments(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != leaseotel.ScopeName || sm.Scope.Version == "" {
			t.Errorf("scope %q version %q, want %q with a version", sm.Scope.Name, sm.Scope.Version, leaseotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// attrs encodes a set of attributes as "k=v,k=v", sorted by key.
func attrs(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// counts returns the events counter's values by their attributes.
func (r *recorder) counts(t *testing.T) map[string]int64 {
	t.Helper()
	m, ok := r.instruments(t)[leaseotel.EventsCounter]
	if !ok {
		return nil
	}
	if m.Unit != "{event}" {
		t.Errorf("%s unit %q, want {event}", m.Name, m.Unit)
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok || !sum.IsMonotonic {
		t.Fatalf("%s is %T, want a monotonic Sum[int64]", m.Name, m.Data)
	}
	out := map[string]int64{}
	for _, p := range sum.DataPoints {
		out[attrs(p.Attributes)] = p.Value
	}
	return out
}

// histogram returns the points of the histogram name by their attributes.
func (r *recorder) histogram(t *testing.T, name string) map[string]metricdata.HistogramDataPoint[float64] {
	t.Helper()
	m, ok := r.instruments(t)[name]
	if !ok {
		return nil
	}
	if m.Unit != "s" {
		t.Errorf("%s unit %q, want s", name, m.Unit)
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is %T, want a Histogram[float64]", name, m.Data)
	}
	out := map[string]metricdata.HistogramDataPoint[float64]{}
	for _, p := range h.DataPoints {
		out[attrs(p.Attributes)] = p
	}
	return out
}

// span returns the only span named name, failing unless there is exactly one.
func (r *recorder) span(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range r.spans.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %s, want 1: %v", len(found), name, r.spans.GetSpans())
	}
	return found[0]
}

// spanAttrs returns the attributes of s by key, with values as strings.
func spanAttrs(s tracetest.SpanStub) map[string]string {
	out := map[string]string{}
	for _, a := range s.Attributes {
		out[string(a.Key)] = a.Value.String()
	}
	return out
}

// checkAttrs checks that got has the attributes of want, "" meaning absent.
func checkAttrs(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q (all: %v)", what, k, got[k], v, got)
		}
	}
}

// checkDuration checks that the duration of s is the seconds a histogram recorded.
func checkDuration(t *testing.T, s tracetest.SpanStub, seconds float64) {
	t.Helper()
	if d := s.EndTime.Sub(s.StartTime); math.Abs(d.Seconds()-seconds) > 1e-6 {
		t.Errorf("span %s lasts %v, the histogram recorded %vs", s.Name, d, seconds)
	}
}

// noHolder checks that the holder id, which lets whoever knows it release the lease, was not
// recorded on any span.
func noHolder(t *testing.T, r *recorder, holder string) {
	t.Helper()
	for _, s := range r.spans.GetSpans() {
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.String(), holder) {
				t.Errorf("span %s records the holder id in %s", s.Name, a.Key)
			}
		}
	}
}

// sum returns the points of the Sum[int64] instrument name by their attributes, checking it is
// monotonic or not as want says.
func (r *recorder) sum(t *testing.T, name string, monotonic bool) map[string]int64 {
	t.Helper()
	m, ok := r.instruments(t)[name]
	if !ok {
		return nil
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok || sum.IsMonotonic != monotonic {
		t.Fatalf("%s is %T, want a Sum[int64] with IsMonotonic %v", name, m.Data, monotonic)
	}
	out := map[string]int64{}
	for _, p := range sum.DataPoints {
		out[attrs(p.Attributes)] = p.Value
	}
	return out
}

package leaseotel

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/primitives"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/leasehold/leasehold/otel"

// The names of the instruments, the spans and their attributes.
const (
	WaitHistogram = "leasehold.lease.wait"   // seconds an acquire took, by outcome acquired or refused
	HeldHistogram = "leasehold.lease.held"   // seconds a lease was held, by outcome released or lost
	EventsCounter = "leasehold.lease.events" // events, by outcome (the event's kind)

	AcquireSpan = "leasehold.acquire" // an Acquire or TryAcquire, from its call to its grant or refusal
	HoldSpan    = "leasehold.hold"    // a lease, from its grant to its release or loss

	KeyAttribute     = "leasehold.key"     // the key, or what WithKeyAttribute makes of it
	OutcomeAttribute = "leasehold.outcome" // the event's kind: acquired, refused, refreshed, released, lost
	PermitsAttribute = "leasehold.permits" // spans: the permits asked for or held
	FenceAttribute   = "leasehold.fence"   // spans: the lease's fencing token
	WaitAttribute    = "leasehold.wait"    // acquire spans: the wait in seconds
	HeldAttribute    = "leasehold.held"    // hold spans: the hold time in seconds
)

// Bucket boundaries advised for the histograms, in seconds: a wait is often under a
// millisecond and may last minutes; a lease is held from milliseconds to hours.
var (
	waitBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	heldBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
)

// Telemetry turns the events of leases into metrics and spans. It is safe for concurrent use,
// and one Telemetry may serve any number of Mutexes and Semaphores.
type Telemetry struct {
	tracer  trace.Tracer
	wait    metric.Float64Histogram
	held    metric.Float64Histogram
	events  metric.Int64Counter
	key     func(string) string
	outcome map[primitives.EventKind]attribute.KeyValue // made once: recording allocates less
}

// New makes a Telemetry with the instruments of the package doc, from the providers the options
// give (by default the global ones). It fails with an error wrapping core.ErrInvalid for a bad
// option, or with the meter's error if an instrument cannot be made.
func New(opts ...Option) (*Telemetry, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("leasehold: otel: %w", err)
	}
	meter := c.meters.Meter(ScopeName)
	t := &Telemetry{tracer: c.tracers.Tracer(ScopeName), key: c.key, outcome: map[primitives.EventKind]attribute.KeyValue{}}
	for _, k := range []primitives.EventKind{primitives.EventAcquired, primitives.EventRefused, primitives.EventRefreshed, primitives.EventReleased, primitives.EventLost} {
		t.outcome[k] = attribute.String(OutcomeAttribute, k.String())
	}
	if t.wait, err = meter.Float64Histogram(WaitHistogram, metric.WithUnit("s"),
		metric.WithDescription("How long an acquire of a lease took, until its grant or refusal."),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		return nil, fmt.Errorf("leasehold: otel: %s: %w", WaitHistogram, err)
	}
	if t.held, err = meter.Float64Histogram(HeldHistogram, metric.WithUnit("s"),
		metric.WithDescription("How long a lease was held, until its release or loss."),
		metric.WithExplicitBucketBoundaries(heldBuckets...)); err != nil {
		return nil, fmt.Errorf("leasehold: otel: %s: %w", HeldHistogram, err)
	}
	if t.events, err = meter.Int64Counter(EventsCounter, metric.WithUnit("{event}"),
		metric.WithDescription("Events of leases: acquired, refused, refreshed, released, lost.")); err != nil {
		return nil, fmt.Errorf("leasehold: otel: %s: %w", EventsCounter, err)
	}
	return t, nil
}

// Option returns the primitives.Option that records every event of the leases of a Mutex or
// Semaphore: pass it to NewMutex or NewSemaphore. Recording runs on the goroutine of the event,
// as WithEvents says (the caller's, or a lease's timer), and costs a few allocations and no I/O
// of its own; so give the SDK exporters that batch (sdktrace.WithBatcher, a PeriodicReader),
// not a synchronous one that would hold up Acquire, Release and refreshes.
//
// The Option of a nil Telemetry (New failed and its error was ignored) makes NewMutex and
// NewSemaphore fail with an error wrapping core.ErrInvalid, rather than panic at the first event.
func (t *Telemetry) Option() primitives.Option {
	if t == nil {
		return primitives.WithEvents(nil)
	}
	return primitives.WithEvents(t.record)
}

// record records the event e, which happened just now.
func (t *Telemetry) record(e primitives.Event) {
	now := time.Now()
	outcome, ok := t.outcome[e.Kind]
	if !ok {
		return // a kind newer than this package: nothing to say about it
	}
	spanKey, metricKey, keyed := e.Key, "", false
	if t.key != nil {
		spanKey = t.key(e.Key)
		metricKey, keyed = spanKey, spanKey != ""
	}
	attrs := metric.WithAttributes(outcome)
	if keyed {
		attrs = metric.WithAttributes(outcome, attribute.String(KeyAttribute, metricKey))
	}

	ctx := context.Background()
	switch e.Kind {
	case primitives.EventAcquired, primitives.EventRefused:
		span := t.startSpan(&ctx, e, spanOf{name: AcquireSpan, start: now.Add(-e.Wait), key: spanKey,
			outcome: outcome, duration: attribute.Float64(WaitAttribute, e.Wait.Seconds())})
		span.End(trace.WithTimestamp(now))
		t.wait.Record(ctx, e.Wait.Seconds(), attrs)
	case primitives.EventReleased, primitives.EventLost:
		span := t.startSpan(&ctx, e, spanOf{name: HoldSpan, start: now.Add(-e.Held), key: spanKey,
			outcome: outcome, duration: attribute.Float64(HeldAttribute, e.Held.Seconds())})
		if e.Kind == primitives.EventLost && e.Err != nil {
			span.SetStatus(codes.Error, t.describe(e, spanKey))
		}
		span.End(trace.WithTimestamp(now))
		t.held.Record(ctx, e.Held.Seconds(), attrs)
	}
	// In the span's context, if any, so that an SDK with exemplars links the points to it.
	t.events.Add(ctx, 1, attrs)
}

// describe returns the description of the lost lease's error: the error's text, where the key
// is replaced by what WithKeyAttribute made of it (the key is in the text: "leasehold: hold
// \"invoice:1234\": ..."), so that a key the option hides or bounds does not reach the span
// that way. Without the option the key is on the span anyway.
func (t *Telemetry) describe(e primitives.Event, spanKey string) string {
	desc := e.Err.Error()
	if t.key == nil || e.Key == "" || spanKey == e.Key {
		return desc
	}
	if spanKey == "" {
		spanKey = "…"
	}
	return strings.ReplaceAll(desc, e.Key, spanKey)
}

// spanOf is the span an event makes: its name and start, the key attribute ("" for none), the
// outcome, and the duration attribute (wait or hold).
type spanOf struct {
	name              string
	start             time.Time
	key               string
	outcome, duration attribute.KeyValue
}

// startSpan starts the span s for the event e and sets *ctx to the span's context.
func (t *Telemetry) startSpan(ctx *context.Context, e primitives.Event, s spanOf) trace.Span {
	name, start, key, outcome, d := s.name, s.start, s.key, s.outcome, s.duration
	attrs := make([]attribute.KeyValue, 0, 5)
	if key != "" {
		attrs = append(attrs, attribute.String(KeyAttribute, key))
	}
	attrs = append(attrs, outcome, attribute.Int(PermitsAttribute, e.Permits), d)
	if e.Fence != 0 {
		attrs = append(attrs, fence(e.Fence))
	}
	var span trace.Span
	*ctx, span = t.tracer.Start(*ctx, name, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	return span
}

// fence is the attribute of a fencing token: an int64, which every token made from a store's
// clock in µs is for the next 290,000 years; a string past that, as attributes have no uint64.
func fence(f uint64) attribute.KeyValue {
	if f > math.MaxInt64 {
		return attribute.String(FenceAttribute, fmt.Sprint(f))
	}
	return attribute.Int64(FenceAttribute, int64(f))
}

package leaseotel

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// ScopeName is the instrumentation scope of the meter and the tracer; its version is the
// module's (see the package doc).
const ScopeName = "github.com/leasehold/leasehold/otel"

// The names of the instruments, the spans, their events and their attributes.
const (
	WaitDuration  = "leasehold.lease.wait.duration" // seconds an acquire took, by outcome acquired, refused or acquire_failed
	HoldDuration  = "leasehold.lease.hold.duration" // seconds a lease was held, by outcome released or lost
	EventsCounter = "leasehold.lease.events"        // events, by outcome (the event's kind)
	ErrorsCounter = "leasehold.lease.errors"        // failed store operations, by operation and error.type
	ActiveLeases  = "leasehold.lease.active"        // up-down: leases held now by this process
	Waiters       = "leasehold.lease.waiters"       // up-down: Acquire calls of this process waiting now

	AcquireSpan = "leasehold.acquire" // an Acquire or TryAcquire, from its call to its grant, refusal or failure
	HoldSpan    = "leasehold.hold"    // a lease, from its grant to its release or loss

	RefreshFailedEvent    = "leasehold.refresh.failed"    // hold span: the first of a run of failed refreshes
	RefreshRecoveredEvent = "leasehold.refresh.recovered" // hold span: a refresh succeeded after failures
	ReleaseFailedEvent    = "leasehold.release.failed"    // hold span: a Release failed; the lease stays until its deadline

	KeyAttribute       = "leasehold.key"       // the key, or what WithKeyAttribute makes of it
	OutcomeAttribute   = "leasehold.outcome"   // the event's kind, with "_" for spaces: acquired, refused, acquire_failed, ...
	OperationAttribute = "leasehold.operation" // errors: acquire, refresh or release
	PermitsAttribute   = "leasehold.permits"   // spans: the permits asked for or held
	FenceAttribute     = "leasehold.fence"     // spans: the lease's fencing token
	WaitAttribute      = "leasehold.wait"      // acquire spans: the wait in seconds
	HeldAttribute      = "leasehold.held"      // hold spans: the hold time in seconds
	ErrorTypeAttribute = "error.type"          // failures: the kind of error (see the package doc)
	MessageAttribute   = "exception.message"   // span events of failures: the error's text
)

// Bucket boundaries advised for the histograms, in seconds: a wait is often under a
// millisecond and may last minutes; a lease is held from milliseconds to hours.
var (
	waitBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	heldBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
)

// maxSpanEvents bounds the span events kept for one lease's hold span.
const maxSpanEvents = 32

// Telemetry turns the events of leases into metrics and spans. It is safe for concurrent use,
// and one Telemetry may serve any number of Mutexes and Semaphores.
type Telemetry struct {
	tracer  trace.Tracer
	wait    metric.Float64Histogram
	held    metric.Float64Histogram
	events  metric.Int64Counter
	errors  metric.Int64Counter
	active  metric.Int64UpDownCounter
	waiters metric.Int64UpDownCounter
	key     func(string) string
	outcome map[primitives.EventKind]attribute.KeyValue // made once: recording allocates less

	mu    sync.Mutex
	holds map[core.Lease]*hold // the leases granted by an acquire, until they end
}

// hold is what is kept of a held lease until its hold span is made, when it ends.
type hold struct {
	parent  trace.SpanContext // the acquire caller's span
	metrics metric.MeasurementOption
	events  []spanEvent
}

// spanEvent is an event of a hold span, recorded before the span is.
type spanEvent struct {
	name  string
	at    time.Time
	attrs []attribute.KeyValue
}

// New makes a Telemetry with the instruments of the package doc, from the providers the options
// give (by default the global ones). It fails with an error wrapping core.ErrInvalid for a bad
// option, or with the meter's error if an instrument cannot be made.
func New(opts ...Option) (*Telemetry, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("leasehold: otel: %w", err)
	}
	version := moduleVersion()
	meter := c.meters.Meter(ScopeName, metric.WithInstrumentationVersion(version))
	t := &Telemetry{
		tracer:  c.tracers.Tracer(ScopeName, trace.WithInstrumentationVersion(version)),
		key:     c.key,
		outcome: map[primitives.EventKind]attribute.KeyValue{},
		holds:   map[core.Lease]*hold{},
	}
	for _, k := range []primitives.EventKind{primitives.EventAcquired, primitives.EventRefused, primitives.EventRefreshed,
		primitives.EventReleased, primitives.EventLost, primitives.EventWaiting, primitives.EventAcquireFailed,
		primitives.EventRefreshFailed, primitives.EventRefreshRecovered, primitives.EventReleaseFailed} {
		t.outcome[k] = attribute.String(OutcomeAttribute, strings.ReplaceAll(k.String(), " ", "_"))
	}
	fail := func(name string, err error) (*Telemetry, error) {
		return nil, fmt.Errorf("leasehold: otel: %s: %w", name, err)
	}
	if t.wait, err = meter.Float64Histogram(WaitDuration, metric.WithUnit("s"),
		metric.WithDescription("How long an acquire of a lease took, until its grant, refusal or failure."),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		return fail(WaitDuration, err)
	}
	if t.held, err = meter.Float64Histogram(HoldDuration, metric.WithUnit("s"),
		metric.WithDescription("How long a lease was held, until its release or loss."),
		metric.WithExplicitBucketBoundaries(heldBuckets...)); err != nil {
		return fail(HoldDuration, err)
	}
	if t.events, err = meter.Int64Counter(EventsCounter, metric.WithUnit("{event}"),
		metric.WithDescription("Events of leases, by outcome: acquired, refused, released, lost, ...")); err != nil {
		return fail(EventsCounter, err)
	}
	if t.errors, err = meter.Int64Counter(ErrorsCounter, metric.WithUnit("{error}"),
		metric.WithDescription("Failed acquires, refreshes and releases, by operation and error.type.")); err != nil {
		return fail(ErrorsCounter, err)
	}
	if t.active, err = meter.Int64UpDownCounter(ActiveLeases, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases held by this process.")); err != nil {
		return fail(ActiveLeases, err)
	}
	if t.waiters, err = meter.Int64UpDownCounter(Waiters, metric.WithUnit("{waiter}"),
		metric.WithDescription("Acquires of this process waiting for a lease.")); err != nil {
		return fail(Waiters, err)
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
	outcome, ok := t.outcome[e.Kind]
	if !ok {
		return // a kind newer than this package: nothing to say about it
	}
	r := t.recording(e, outcome)
	ctx := r.parent
	switch e.Kind {
	case primitives.EventWaiting:
		t.waiters.Add(r.parent, 1, r.gauge)
	case primitives.EventAcquired, primitives.EventRefused, primitives.EventAcquireFailed:
		ctx = t.recordAcquire(e, r)
	case primitives.EventRefreshFailed, primitives.EventRefreshRecovered, primitives.EventReleaseFailed:
		t.recordHoldEvent(e, r)
	case primitives.EventReleased, primitives.EventLost:
		ctx = t.recordHoldEnd(e, r)
	}
	// In the span's context, if any, so that an SDK with exemplars links the points to it.
	t.events.Add(ctx, 1, r.attrs)
}

// eventRecording is what recording one event starts from: its time, outcome and key as spans
// and metrics show them, the metric attributes, and the caller's context.
type eventRecording struct {
	now                time.Time
	outcome            attribute.KeyValue
	spanKey, metricKey string
	keyed              bool                     // metrics carry metricKey
	attrs              metric.MeasurementOption // the outcome, and the key if keyed
	gauge              metric.MeasurementOption // the up-down counters': the key alone, if keyed
	parent             context.Context
}

// recording returns what recording the event e, of outcome, starts from.
func (t *Telemetry) recording(e primitives.Event, outcome attribute.KeyValue) eventRecording {
	r := eventRecording{now: time.Now(), outcome: outcome, spanKey: e.Key, parent: e.Context,
		attrs: metric.WithAttributes(outcome), gauge: metric.WithAttributes()}
	if t.key != nil {
		r.spanKey = t.key(e.Key)
		r.metricKey, r.keyed = r.spanKey, r.spanKey != ""
	}
	if r.keyed {
		key := attribute.String(KeyAttribute, r.metricKey)
		r.attrs = metric.WithAttributes(outcome, key)
		r.gauge = metric.WithAttributes(key)
	}
	if r.parent == nil {
		r.parent = context.Background()
	}
	return r
}

// recordAcquire records an acquire's end (granted, refused or failed): its span, its wait, and
// for a grant the hold it starts. It returns the acquire span's context.
func (t *Telemetry) recordAcquire(e primitives.Event, r eventRecording) context.Context {
	if e.Waited {
		t.waiters.Add(r.parent, -1, r.gauge)
	}
	ctx := r.parent
	span := t.startSpan(&ctx, e, spanOf{name: AcquireSpan, start: r.now.Add(-e.Wait), key: r.spanKey,
		outcome: r.outcome, duration: attribute.Float64(WaitAttribute, e.Wait.Seconds())})
	if e.Kind == primitives.EventAcquireFailed && e.Err != nil {
		typ := errorType(e.Err)
		span.SetAttributes(attribute.String(ErrorTypeAttribute, typ))
		span.SetStatus(codes.Error, t.describe(e, r.spanKey))
		t.countError(ctx, "acquire", typ, r.keyed, r.metricKey)
	}
	span.End(trace.WithTimestamp(r.now))
	t.wait.Record(ctx, e.Wait.Seconds(), r.attrs)
	if e.Kind == primitives.EventAcquired && e.Lease != nil {
		t.mu.Lock()
		t.holds[e.Lease] = &hold{parent: trace.SpanContextFromContext(r.parent), metrics: r.gauge}
		t.mu.Unlock()
		t.active.Add(r.parent, 1, r.gauge)
	}
	return ctx
}

// recordHoldEvent records a failed or recovered refresh or a failed release of a held lease: an
// error counted, and an event kept for the hold's span.
func (t *Telemetry) recordHoldEvent(e primitives.Event, r eventRecording) {
	name, op := RefreshFailedEvent, "refresh"
	switch e.Kind {
	case primitives.EventRefreshRecovered:
		name = RefreshRecoveredEvent
	case primitives.EventReleaseFailed:
		name, op = ReleaseFailedEvent, "release"
	}
	var ev []attribute.KeyValue
	if e.Err != nil {
		ev = append(ev, attribute.String(MessageAttribute, t.describe(e, r.spanKey)))
	}
	if e.Kind != primitives.EventRefreshRecovered && e.Err != nil {
		typ := errorType(e.Err)
		ev = append(ev, attribute.String(ErrorTypeAttribute, typ))
		t.countError(r.parent, op, typ, r.keyed, r.metricKey)
	}
	t.mu.Lock()
	if h := t.holds[e.Lease]; h != nil && len(h.events) < maxSpanEvents {
		h.events = append(h.events, spanEvent{name: name, at: r.now, attrs: ev})
	}
	t.mu.Unlock()
}

// recordHoldEnd records a lease's release or loss: the hold's span with the events kept for it,
// and its duration. It returns the hold span's context.
func (t *Telemetry) recordHoldEnd(e primitives.Event, r eventRecording) context.Context {
	t.mu.Lock()
	h := t.holds[e.Lease]
	delete(t.holds, e.Lease)
	t.mu.Unlock()
	ctx := r.parent
	if h != nil {
		t.active.Add(r.parent, -1, h.metrics)
		// The hold span is a child of the acquire caller's span; of the releaser's for a
		// lease no acquire granted (Adopt).
		ctx = trace.ContextWithSpanContext(r.parent, h.parent)
	}
	span := t.startSpan(&ctx, e, spanOf{name: HoldSpan, start: r.now.Add(-e.Held), key: r.spanKey,
		outcome: r.outcome, duration: attribute.Float64(HeldAttribute, e.Held.Seconds())})
	if h != nil {
		for _, ev := range h.events {
			span.AddEvent(ev.name, trace.WithTimestamp(ev.at), trace.WithAttributes(ev.attrs...))
		}
	}
	if e.Kind == primitives.EventLost && e.Err != nil {
		span.SetAttributes(attribute.String(ErrorTypeAttribute, errorType(e.Err)))
		span.SetStatus(codes.Error, t.describe(e, r.spanKey))
	}
	span.End(trace.WithTimestamp(r.now))
	t.held.Record(ctx, e.Held.Seconds(), r.attrs)
	return ctx
}

// countError counts a failed operation op of error type typ.
func (t *Telemetry) countError(ctx context.Context, op, typ string, keyed bool, key string) {
	kv := []attribute.KeyValue{attribute.String(OperationAttribute, op), attribute.String(ErrorTypeAttribute, typ)}
	if keyed {
		kv = append(kv, attribute.String(KeyAttribute, key))
	}
	t.errors.Add(ctx, 1, metric.WithAttributes(kv...))
}

// describe returns the description of the event's error: the error's text, where the key
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

// startSpan starts the span s for the event e, as a child of the span in *ctx, if any, and sets
// *ctx to the new span's context.
func (t *Telemetry) startSpan(ctx *context.Context, e primitives.Event, s spanOf) trace.Span {
	name, start, key, outcome, d := s.name, s.start, s.key, s.outcome, s.duration
	attrs := make([]attribute.KeyValue, 0, 6)
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

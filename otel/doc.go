// Package leaseotel records the leases of Leasehold's Mutex and Semaphore as OpenTelemetry
// metrics and spans. It is built on primitives.WithEvents: make a Telemetry with New and pass
// its Option to NewMutex or NewSemaphore.
//
//	tel, err := leaseotel.New() // the global MeterProvider and TracerProvider
//	if err != nil { ... }
//	mu, err := primitives.NewMutex(store, "report:daily", tel.Option())
//
// The package lives in a module of its own, github.com/leasehold/leasehold/otel, so that the
// OpenTelemetry modules are downloaded only by programs that import it. Its name is leaseotel,
// not otel, so that it can be imported beside go.opentelemetry.io/otel without renaming either.
//
// # Metrics
//
// Durations are in seconds, as the OpenTelemetry semantic conventions ask. The instrumentation
// scope is "github.com/leasehold/leasehold/otel".
//
//	leasehold.lease.wait    histogram, s        how long Acquire or TryAcquire took, from the call to the grant or the refusal
//	                                            (Event.Wait); leasehold.outcome is acquired or refused
//	leasehold.lease.held    histogram, s        how long a lease was held, from the grant to its release or loss (Event.Held);
//	                                            leasehold.outcome is released or lost
//	leasehold.lease.events  counter, {event}    one per event; leasehold.outcome is acquired, refused, refreshed, released or lost
//
// The histograms advise bucket boundaries from 1 ms to 5 min (wait) and from 10 ms to 1 h
// (held); a View in the SDK can replace them.
//
// # Spans
//
// Every acquire that ends in a grant or a refusal is a span named leasehold.acquire, from the
// call to Acquire or TryAcquire to its end (its start is the event's time less Event.Wait).
// Every lease that ends, by Release or by loss, is a span named leasehold.hold, from the grant
// to that end (the event's time less Event.Held). A lost lease's hold span has status Error,
// described by the lease's Err (where the key in its text becomes what WithKeyAttribute makes of
// it); a refused acquire is not an error (its status is left unset):
// refusing is what a held lock is for. Span attributes:
//
//	leasehold.key      the key (see below)
//	leasehold.outcome  acquire: acquired or refused; hold: released or lost
//	leasehold.permits  the permits asked for or held
//	leasehold.fence    the lease's fencing token (acquired, released, lost)
//	leasehold.wait     acquire: the wait in seconds, as the span's duration
//	leasehold.held     hold: the hold time in seconds, as the span's duration
//
// An event carries no context, so these spans are the roots of traces of their own, not
// children of the caller's span. The two spans of one lease share its key and fence.
// The holder id is never recorded: whoever knows it can release or adopt the lease.
// To record metrics only, pass WithTracerProvider(noop.NewTracerProvider()), from
// go.opentelemetry.io/otel/trace/noop; to record spans only, the metric API's noop provider.
//
// # Keys and cardinality
//
// Each key would be a time series of each instrument, and keys are often made of ids, so by
// default metrics carry no key: they add up every Mutex and Semaphore given the same Telemetry.
// Spans, one per operation, carry the key as it is. WithKeyAttribute(f) sets the value of the
// leasehold.key attribute, on metrics and spans alike, to f(key), or leaves it out when f returns
// "": f must map the keys to a small set, for example by dropping the id from "invoice:1234".
// (The OpenTelemetry SDK also caps the attribute sets of each instrument, at 2000 by default,
// folding the rest into one overflow series.) A Telemetry per Mutex or Semaphore is another way
// to tell them apart, as long as its providers do.
//
// # What is not recorded
//
// Events are what primitives reports: an Acquire that fails with an error other than
// core.ErrNotAcquired (its ctx ended, the store failed) and an Adopt are not events, so neither
// is recorded; the lease an Adopt returns is recorded when it ends, its hold measured from the
// Adopt, not from the original grant. A lease is recorded only when it ends: no span is open
// while it is held, so nothing is kept per lease, and a lease still held has no hold span yet.
package leaseotel

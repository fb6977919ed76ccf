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
// # Traces
//
// The spans are children of the caller's span, the one in the ctx passed to Acquire, TryAcquire
// or Do, so that the lock appears in the trace of the request that waited for it:
//
//	POST /invoices/1234/pay          the request's span, in the ctx given to Do
//	  leasehold.acquire              the wait for the lock, from the call to the grant
//	  leasehold.hold                 the lease, from the grant to the release
//
// A span named leasehold.acquire covers every Acquire or TryAcquire, from its call to its
// grant, refusal or failure. A span named leasehold.hold covers every lease granted, from the
// grant to its release or loss; it is a child of the acquire's caller's span (of the releaser's,
// the ctx passed to Release, for a lease from Adopt). A hold span is made when its lease ends,
// with the times of the lease, so it is a sibling of the work done under the lease, not its
// parent. Its span events record what happened meanwhile:
//
//	leasehold.refresh.failed     the first of a run of failed refreshes (error.type, exception.message)
//	leasehold.refresh.recovered  a refresh succeeded after failures (exception.message: how many, the last error)
//	leasehold.release.failed     a Release failed; the lease stays until it is retried or its deadline
//
// A failed acquire has status Error, described by its error, and error.type. A lost lease's hold
// span has status Error, described by the lease's Err (which says how many refreshes failed and
// the last error, when that is why), and error.type lost. In descriptions and messages the key
// becomes what WithKeyAttribute makes of it. A refused acquire is not an error (its status is
// left unset): refusing is what a held lock is for. Span attributes:
//
//	leasehold.key      the key (see below)
//	leasehold.outcome  acquire: acquired, refused or acquire_failed; hold: released or lost
//	leasehold.permits  the permits asked for or held
//	leasehold.fence    the lease's fencing token (acquired, released, lost)
//	leasehold.wait     acquire: the wait in seconds, as the span's duration
//	leasehold.held     hold: the hold time in seconds, as the span's duration
//	error.type         failed acquire, lost lease: the kind of error (below)
//
// The two spans of one lease share its key and fence. The holder id is never recorded: whoever
// knows it can release or adopt the lease. To record metrics only, pass
// WithTracerProvider(noop.NewTracerProvider()), from go.opentelemetry.io/otel/trace/noop; to
// record spans only, the metric API's noop provider.
//
// # Metrics
//
// Durations are in seconds, as the OpenTelemetry semantic conventions ask. The instrumentation
// scope is "github.com/leasehold/leasehold/otel", its version the module's version in the
// binary's build info (v0.0.0-devel when there is none, as in a build of this repository).
//
//	leasehold.lease.wait.duration  histogram, s       how long Acquire or TryAcquire took (Event.Wait);
//	                                                  leasehold.outcome is acquired, refused or acquire_failed
//	leasehold.lease.hold.duration  histogram, s       how long a lease was held, from the grant to its release or
//	                                                  loss (Event.Held); leasehold.outcome is released or lost
//	leasehold.lease.active         up-down, {lease}   leases held now by this process
//	leasehold.lease.waiters        up-down, {waiter}  Acquire calls of this process waiting now (refused once, not
//	                                                  yet granted, refused for good or failed)
//	leasehold.lease.errors         counter, {error}   failed operations, by leasehold.operation (acquire, refresh,
//	                                                  release) and error.type; refresh counts once per run of failures
//	leasehold.lease.events         counter, {event}   one per event; leasehold.outcome is the event's kind, with _ for
//	                                                  spaces: acquired, waiting, refused, acquire_failed, refreshed,
//	                                                  refresh_failed, refresh_recovered, released, release_failed, lost
//
// The histograms advise bucket boundaries from 1 ms to 5 min (wait) and from 10 ms to 1 h
// (held); a View in the SDK can replace them. Leases from Adopt are not counted as active.
//
// error.type is the sentinel a failure wraps (lost, closed, limit_mismatch, not_held, invalid,
// canceled, deadline_exceeded), or else the Go type of the store's error, such as
// *net.OpError for a refused connection: a small set, fit for a metric attribute.
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
// Events are what primitives reports: an Adopt is not an event, so it is not recorded; the lease
// an Adopt returns is recorded when it ends, its hold measured from the Adopt, not from the
// original grant. A hold span is made when its lease ends, so a lease still held has no hold
// span yet; until then the Telemetry keeps a few words per lease (its parent span and up to 32
// span events), given back when the lease ends.
package leaseotel

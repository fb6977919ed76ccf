package primitives

import (
	"context"
	"log/slog"
	"time"
)

// EventKind says what happened to a lease.
type EventKind int

// The kinds of events. Every Acquire or TryAcquire that reaches the store ends in one of
// EventAcquired, EventRefused and EventAcquireFailed; every lease it grants ends in one of
// EventReleased and EventLost, and its events follow its EventAcquired. (A lease from Adopt has
// no EventAcquired.)
const (
	EventAcquired  EventKind = iota + 1 // Acquire or TryAcquire got the lease (Wait says how long it took)
	EventRefused                        // Acquire or TryAcquire gave up with ErrNotAcquired
	EventRefreshed                      // a background refresh extended the lease
	EventLost                           // the lease was lost (Err says why)
	EventReleased                       // the holder released the lease (Held says how long it was held)

	EventWaiting          // Acquire was refused and waits for room: one per Acquire call, at its first wait
	EventAcquireFailed    // Acquire or TryAcquire failed otherwise: the store failed, or ctx ended (Err says why)
	EventRefreshFailed    // a background refresh failed and will be retried: once per run of failures (Err says why)
	EventRefreshRecovered // a background refresh succeeded after EventRefreshFailed
	EventReleaseFailed    // Release failed: the lease stays, unrefreshed, until Release is retried or its deadline (Err says why)
)

var kindNames = [...]string{
	EventAcquired: "acquired", EventRefused: "refused", EventRefreshed: "refreshed", EventLost: "lost", EventReleased: "released",
	EventWaiting: "waiting", EventAcquireFailed: "acquire failed", EventRefreshFailed: "refresh failed",
	EventRefreshRecovered: "refresh recovered", EventReleaseFailed: "release failed",
}

func (k EventKind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Event describes one thing that happened to a lease of a Mutex or Semaphore.
type Event struct {
	Kind    EventKind
	Key     string
	Holder  string
	Permits int
	Fence   uint64        // zero until granted: EventWaiting, EventRefused, EventAcquireFailed
	Wait    time.Duration // EventAcquired, EventRefused, EventAcquireFailed: how long the acquire took
	Held    time.Duration // EventReleased, EventLost: how long the lease had been held
	Err     error         // EventRefused, EventAcquireFailed, EventRefreshFailed, EventReleaseFailed, EventLost: why

	// Waited says, on EventAcquired, EventRefused and EventAcquireFailed, that the call emitted
	// EventWaiting before: it waited in this process until now.
	Waited bool
	// Lease is the lease the event is about, the one the acquire returned; nil for EventWaiting,
	// EventRefused and EventAcquireFailed. It stays the same value for every event of one lease,
	// so a handler may key per-lease state by it.
	Lease Lease
	// Context is the context of the call the event belongs to, for the values it carries (a
	// trace's span, say): the ctx passed to Acquire or TryAcquire for the events of the acquire;
	// the ctx passed to Release for EventReleased, EventReleaseFailed, and EventLost when
	// Release found the loss; otherwise (refreshes, a loss found by a refresh, at the deadline,
	// by Extend or Held) that of the acquire that granted the lease, without its cancellation.
	// Never nil. Handlers must not wait on it.
	Context context.Context
}

// WithEvents calls f for every event of the leases the Mutex or Semaphore grants. f runs
// synchronously on the goroutine where the event happens (the caller's, or a lease's timer), so
// it must be quick and must not block; it may be called concurrently. Several WithEvents and
// WithLogger options all receive every event. With any handler set, a lease keeps the values of
// its acquire's ctx (not its cancellation) until it ends, for Event.Context.
func WithEvents(f func(Event)) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("events: func must not be nil")
			return
		}
		c.events = append(c.events, f)
	}
}

// WithLogger logs the events to logger, with the key, holder, permits, fence, durations and
// error as attributes and Event.Context as the record's context: acquired, waiting, refreshed
// and released at Debug; refused and refresh recovered at Info; acquire failed, refresh failed
// (once per run of failed refreshes) and release failed at Warn; lost at Error.
func WithLogger(logger *slog.Logger) Option {
	if logger == nil {
		return func(c *config) { c.invalid("logger: must not be nil") }
	}
	return WithEvents(func(e Event) {
		level := slog.LevelDebug
		switch e.Kind {
		case EventRefused, EventRefreshRecovered:
			level = slog.LevelInfo
		case EventAcquireFailed, EventRefreshFailed, EventReleaseFailed:
			level = slog.LevelWarn
		case EventLost:
			level = slog.LevelError
		}
		ctx := e.Context
		if ctx == nil {
			ctx = context.Background()
		}
		if !logger.Enabled(ctx, level) {
			return
		}
		attrs := []slog.Attr{slog.String("key", e.Key), slog.String("holder", e.Holder), slog.Int("permits", e.Permits)}
		if e.Fence != 0 {
			attrs = append(attrs, slog.Uint64("fence", e.Fence))
		}
		if e.Wait != 0 {
			attrs = append(attrs, slog.Duration("wait", e.Wait))
		}
		if e.Held != 0 {
			attrs = append(attrs, slog.Duration("held", e.Held))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("err", e.Err.Error()))
		}
		logger.LogAttrs(ctx, level, "leasehold: lease "+e.Kind.String(), attrs...)
	})
}

func (c *config) emit(e Event) {
	if e.Context == nil {
		e.Context = context.Background()
	}
	for _, f := range c.events {
		f(e)
	}
}

package primitives

import (
	"context"
	"log/slog"
	"time"
)

// EventKind says what happened to a lease.
type EventKind int

// The kinds of events.
const (
	EventAcquired  EventKind = iota + 1 // Acquire or TryAcquire got the lease (Wait says how long it took)
	EventRefused                        // Acquire or TryAcquire gave up with core.ErrNotAcquired
	EventRefreshed                      // a background refresh extended the lease
	EventLost                           // the lease was lost (Err says why)
	EventReleased                       // the holder released the lease (Held says how long it was held)
)

var kindNames = [...]string{EventAcquired: "acquired", EventRefused: "refused", EventRefreshed: "refreshed", EventLost: "lost", EventReleased: "released"}

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
	Fence   uint64        // zero for EventRefused
	Wait    time.Duration // EventAcquired, EventRefused: how long the acquire took
	Held    time.Duration // EventReleased, EventLost: how long the lease had been held
	Err     error         // EventRefused, EventLost: why
}

// WithEvents calls f for every event of the leases the Mutex or Semaphore grants. f runs
// synchronously on the goroutine where the event happens (the caller's, or a lease's timer), so
// it must be quick and must not block; it may be called concurrently. Several WithEvents and
// WithLogger options all receive every event.
func WithEvents(f func(Event)) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("events: func must not be nil")
			return
		}
		c.events = append(c.events, f)
	}
}

// WithLogger logs every event to logger: acquired, refreshed and released at Debug, refused at
// Info, lost at Error, with the key, holder, permits, fence and durations as attributes.
func WithLogger(logger *slog.Logger) Option {
	if logger == nil {
		return func(c *config) { c.invalid("logger: must not be nil") }
	}
	return WithEvents(func(e Event) {
		level := slog.LevelDebug
		switch e.Kind {
		case EventRefused:
			level = slog.LevelInfo
		case EventLost:
			level = slog.LevelError
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
		logger.LogAttrs(context.Background(), level, "leasehold: lease "+e.Kind.String(), attrs...)
	})
}

func (c *config) emit(e Event) {
	for _, f := range c.events {
		f(e)
	}
}

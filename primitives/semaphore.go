package primitives

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/core"
)

// Semaphore is a distributed weighted semaphore: at most Limit permits on one key are held at a
// time, across every process that shares the store. Each acquire takes n permits at once,
// 1 <= n <= Limit, as one lease. A Semaphore is safe for concurrent use; it holds no state of its
// own between calls, so any number of them may exist for one key.
type Semaphore struct {
	store    Store
	notifier core.Notifier // nil when the store has no notifications
	watcher  core.Watcher  // nil when the store cannot announce changes; waiters use it without a notifier
	key      string
	limit    int
	cfg      config
	// gate, when set, runs before each try: blocked (with how long until it may not be) stops
	// the try as a refusal would, without asking the store. A read-write lock's readers use it
	// on a store without a line.
	gate func(ctx context.Context) (blocked bool, retryAfter time.Duration, err error)
}

// NewSemaphore returns a Semaphore of limit permits on key, 1 <= limit <= core.MaxLimit. It
// checks its arguments and options and returns an error wrapping ErrInvalid that names the
// bad one; it does not touch the store.
func NewSemaphore(store Store, key string, limit int, opts ...Option) (*Semaphore, error) {
	return newSemaphore(store, resource{kind: "semaphore", key: key, limit: limit}, opts)
}

// resource is what a constructor was asked for: its kind (for messages), key and limit, and
// the longest key it takes (MaxKeyLen when zero).
type resource struct {
	kind, key string
	limit     int
	maxKeyLen int
}

func newSemaphore(store Store, r resource, opts []Option) (*Semaphore, error) {
	kind, key, limit := r.kind, r.key, r.limit
	fail := func(err error) (*Semaphore, error) {
		return nil, fmt.Errorf("leasehold: new %s %s: %w", kind, quoteKey(key), err)
	}
	keyErr := checkKey(key, cmp.Or(r.maxKeyLen, MaxKeyLen))
	switch {
	case store == nil:
		return fail(fmt.Errorf("%w: store: must not be nil", ErrInvalid))
	case keyErr != nil:
		return fail(keyErr)
	case limit < 1:
		return fail(fmt.Errorf("%w: limit %d: must be >= 1", ErrInvalid, limit))
	case limit > core.MaxLimit:
		return fail(fmt.Errorf("%w: limit %d: must be at most %d (core.MaxLimit)", ErrInvalid, limit, core.MaxLimit))
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return fail(err)
	}
	s := &Semaphore{store: store, key: key, limit: limit, cfg: cfg}
	s.notifier, _ = store.(core.Notifier)
	s.watcher, _ = store.(core.Watcher)
	return s, nil
}

// Key returns the resource key.
func (s *Semaphore) Key() string { return s.key }

// Limit returns the number of permits.
func (s *Semaphore) Limit() int { return s.limit }

// Acquire takes n permits, waiting until they are free, the acquire timeout passes (an error
// wrapping ErrNotAcquired), the attempts run out (likewise), or ctx ends (an error for which
// errors.Is(err, ctx.Err()) holds). On failure the caller holds nothing: a grant that may have
// raced the end of ctx is released in the background, except under WithHolder, whose id may name a
// lease held elsewhere, where such a grant is left to expire. A ctx that has ended already sends
// nothing to the store (no try, no release, no event). Cost: one store round trip per try; an
// uncontended acquire is one.
//
// A waiter tries again when a release notification wakes it, when the store says the leases in its
// way expire, or after the retry interval, whichever comes first. On a store without notifications
// that announces changes (core.Watcher: Redlock), a wait that outlasts one retry interval watches
// the key and tries again on each change.
func (s *Semaphore) Acquire(ctx context.Context, n int) (Lease, error) {
	return s.acquire(ctx, n, s.cfg.attempts)
}

// TryAcquire makes exactly one attempt to take n permits: one store round trip. When they are
// not free it returns an error wrapping ErrNotAcquired.
func (s *Semaphore) TryAcquire(ctx context.Context, n int) (Lease, error) {
	return s.acquire(ctx, n, 1)
}

// Adopt takes over the lease that holder holds on the key, acquired elsewhere (another process,
// or a lease handed over by id), by extending it: one store round trip. The returned lease is
// refreshed and released like any other. If holder holds no lease on the key, Adopt returns an
// error wrapping ErrNotHeld.
func (s *Semaphore) Adopt(ctx context.Context, holder string) (Lease, error) {
	if holder == "" {
		return nil, fmt.Errorf("leasehold: adopt %s: %w: holder: must not be empty", quoteKey(s.key), ErrInvalid)
	}
	start := time.Now()
	res, err := s.store.Extend(ctx, core.ExtendRequest{Key: s.key, Holder: holder, TTL: s.cfg.ttl})
	if err != nil {
		if errors.Is(err, ErrLost) {
			return nil, fmt.Errorf("leasehold: adopt %s: %w", quoteKey(s.key), ErrNotHeld)
		}
		return nil, fmt.Errorf("leasehold: adopt %s: %w", quoteKey(s.key), err)
	}
	l := s.newLease(ctx, grant{holder: holder, permits: res.Permits, fence: res.Fence, value: res.Value}, start)
	l.arm()
	return l, nil
}

func (s *Semaphore) acquire(ctx context.Context, n, attempts int) (Lease, error) {
	if n < 1 || n > s.limit {
		return nil, fmt.Errorf("leasehold: acquire %s: %w: permits %d: must be in [1, %d]", quoteKey(s.key), ErrInvalid, n, s.limit)
	}
	if err := ctx.Err(); err != nil {
		// Nothing is sent for a ctx that has ended: no try, so nothing to give back either.
		return nil, fmt.Errorf("leasehold: acquire %s: %w", quoteKey(s.key), err)
	}
	holder := s.cfg.holder
	if holder == "" {
		holder = newHolder()
	}
	req := core.AcquireRequest{Key: s.key, Holder: holder, Permits: n, Limit: s.limit, TTL: s.cfg.ttl, Value: s.cfg.value,
		LockDelay: s.cfg.lockDelay, Unshared: s.cfg.holder == ""}
	a := acquisition{s: s, req: req, attempts: attempts, begin: time.Now()}
	defer a.close()
	waited := false
	fail := func(err error) (Lease, error) {
		err = fmt.Errorf("leasehold: acquire %s: %w", quoteKey(s.key), err)
		if len(s.cfg.events) > 0 {
			kind := EventAcquireFailed
			if errors.Is(err, ErrNotAcquired) {
				kind = EventRefused
			}
			s.cfg.emit(Event{Kind: kind, Key: s.key, Holder: holder, Permits: n, Wait: time.Since(a.begin), Err: err, Waited: waited, Context: ctx})
		}
		return nil, err
	}
	for {
		start := time.Now()
		res, err := a.try(ctx)
		if err != nil {
			return fail(err)
		}
		if res.Granted {
			if res.TTL > 0 && res.TTL < s.cfg.ttl {
				// A grant the store handed over without a round trip began before this call:
				// its lease counts from when it has res.TTL left, now.
				if began := time.Now().Add(res.TTL - s.cfg.ttl); began.Before(start) {
					start = began
				}
			}
			if time.Since(start) >= s.cfg.ttl-drift(s.cfg.ttl) {
				// The grant came back after the deadline it would have (a stalled store, say):
				// the lease would be lost on arrival. Ask again: the holder's re-acquire is
				// idempotent and renews the lease from a fresh send time.
				if time.Since(a.begin) >= s.cfg.acquireTimeout {
					if s.cfg.holder == "" { // a chosen id may name a lease held elsewhere: leave it be
						a.abandon()
					}
					return fail(fmt.Errorf("%w: acquire timeout %v exceeded", ErrNotAcquired, s.cfg.acquireTimeout))
				}
				continue
			}
			l := s.newLease(ctx, grant{holder: holder, own: req.Unshared, permits: n, fence: res.Fence, value: req.Value}, start)
			if len(s.cfg.events) > 0 {
				s.cfg.emit(Event{Kind: EventAcquired, Key: s.key, Holder: holder, Permits: n, Fence: res.Fence, Wait: time.Since(a.begin),
					Waited: waited, Lease: l, Context: ctx})
			}
			l.arm() // after the event: the lease's own events follow it
			return l, nil
		}
		if !waited && len(s.cfg.events) > 0 {
			s.cfg.emit(Event{Kind: EventWaiting, Key: s.key, Holder: holder, Permits: n, Context: ctx})
		}
		waited = true
		if err := a.wait(ctx, res.RetryAfter); err != nil {
			return fail(err)
		}
	}
}

// grant is a lease as the store granted it.
type grant struct {
	holder  string
	own     bool // holder was drawn for this grant
	permits int
	fence   uint64
	value   string
}

// newLease returns the lease g, granted by a call with ctx that was sent at start, unarmed.
func (s *Semaphore) newLease(ctx context.Context, g grant, start time.Time) *lease {
	var ectx context.Context // for events only: nothing else keeps the caller's ctx
	if len(s.cfg.events) > 0 {
		ectx = context.WithoutCancel(ctx)
	}
	return newLease(leaseParams{
		ctx:     ectx,
		store:   s.store,
		key:     s.key,
		holder:  g.holder,
		own:     g.own,
		permits: g.permits,
		fence:   g.fence,
		value:   g.value,
		start:   start,
		cfg:     &s.cfg,
	})
}

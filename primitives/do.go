package primitives

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/core"
)

// LeaseContext returns a context derived from parent that is canceled when the lease ends: with
// a cause wrapping core.ErrLost (the lease's Err) if it is lost, with context.Canceled if it is
// released, or when cancel is called. context.Cause tells which. It runs one goroutine, which
// ends with the lease, with parent, or with cancel; call cancel when done, as with
// context.WithCancel.
func LeaseContext(parent context.Context, l core.Lease) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-l.Done():
			if err := l.Err(); err != nil {
				cancel(err)
			} else {
				cancel(context.Canceled)
			}
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Do acquires the lock, runs fn with a context that is canceled (cause wrapping core.ErrLost)
// if the lease is lost, and releases. It returns the acquire's error, or fn's error joined with
// the release's (which wraps core.ErrLost when fn ran partly unprotected). The release is sent
// even when ctx has ended, bounded by the TTL. Costs: those of Acquire and Release.
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return m.sem.Do(ctx, 1, fn)
}

// Do takes n permits, runs fn under the lease as Mutex.Do does, and releases them.
func (s *Semaphore) Do(ctx context.Context, n int, fn func(ctx context.Context) error) error {
	l, err := s.Acquire(ctx, n)
	if err != nil {
		return err
	}
	lctx, cancel := LeaseContext(ctx, l)
	ferr := fn(lctx)
	cancel()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), min(s.cfg.ttl, 10*time.Second))
	defer rcancel()
	return errors.Join(ferr, l.Release(rctx))
}

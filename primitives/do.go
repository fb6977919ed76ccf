package primitives

import (
	"context"
	"time"
)

// Ending is what LeaseContext watches: a Lease or a MultiLease. Done is closed when it ends;
// Err is then nil if it was released, and an error wrapping ErrLost if it was lost.
type Ending interface {
	Done() <-chan struct{}
	Err() error
}

var (
	_ Ending = Lease(nil)
	_ Ending = (*MultiLease)(nil)
)

// LeaseContext returns a context derived from parent that is canceled when l, a Lease or a
// MultiLease, ends: with a cause wrapping ErrLost (l's Err) if it is lost, with context.Canceled
// if it is released, or when cancel is called. context.Cause tells which. It runs one goroutine,
// which ends with l, with parent, or with cancel; call cancel when done, as with
// context.WithCancel.
func LeaseContext(parent context.Context, l Ending) (context.Context, context.CancelFunc) {
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

// Do acquires the lock, runs fn with the lease and with a context derived from ctx that is canceled
// if the lease ends first (with a cause wrapping ErrLost when it is lost), and releases the lease
// when fn returns or panics (the panic then goes on). If the acquire fails, Do returns its error
// and fn does not run. Otherwise it returns fn's error as it is when the release succeeds, else one
// error of both, fn's text then the release's after "; ", that matches each with errors.Is (the
// release's wraps ErrLost when fn ran partly unprotected).
//
// Once Do returns, the lease has ended (or, if its release failed, expires by its TTL,
// unrefreshed): fn must not keep it, and its Fence is stale. The release is sent even when ctx has
// ended, bounded by the TTL and 10s. Costs: those of Acquire and Release, and one goroutine while
// fn runs.
//
// fn may hand lease.Fence() to the resource it writes, which then rejects a stale holder, Extend
// the lease or ask Held; it should leave Release to Do (a Release by fn makes Do's a no-op).
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context, lease Lease) error) error {
	return m.sem.Do(ctx, 1, fn)
}

// Do takes n permits as one lease, runs fn with it as Mutex.Do does, and releases them. It
// returns an error wrapping ErrInvalid, without running fn, when n is out of range.
func (s *Semaphore) Do(ctx context.Context, n int, fn func(ctx context.Context, lease Lease) error) error {
	return do(ctx, s.cfg.ttl, func() (Lease, error) { return s.Acquire(ctx, n) }, fn)
}

// Do takes every key as Acquire does, runs fn with the MultiLease and with a context derived from
// ctx that is canceled if the MultiLease ends first (any member lost: a cause wrapping ErrLost
// that names the key), and releases every key when fn returns or panics (the panic then goes
// on). If the acquire fails, Do returns its error, holds nothing, and fn does not run. Otherwise
// it returns fn's error as it is when the release succeeds, else one error of both, as Mutex.Do
// does. The release is sent even when ctx has ended, bounded by the TTL and 10s for all the keys.
// Costs: those of Acquire and Release, and one goroutine while fn runs. fn should leave Release
// to Do.
func (ml *MultiLock) Do(ctx context.Context, fn func(ctx context.Context, leases *MultiLease) error) error {
	return do(ctx, ml.cfg.ttl, func() (*MultiLease, error) { return ml.Acquire(ctx) }, fn)
}

// releasable is what do runs fn under: a Lease or a MultiLease.
type releasable interface {
	Ending
	Release(ctx context.Context) error
}

// do is Do for any acquire: it runs fn with what acquire returns and releases it, bounded by ttl
// and 10s even when ctx has ended.
func do[L releasable](ctx context.Context, ttl time.Duration, acquire func() (L, error), fn func(ctx context.Context, lease L) error) (err error) {
	l, err := acquire()
	if err != nil {
		return err
	}
	lctx, cancel := LeaseContext(ctx, l)
	defer func() {
		// Deferred so that a panicking fn does not leave the lease held and refreshed for good.
		cancel()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), min(ttl, 10*time.Second))
		defer rcancel()
		if rerr := l.Release(rctx); rerr != nil {
			if err == nil {
				err = rerr
			} else {
				err = &doError{fn: err, release: rerr}
			}
		}
	}()
	return fn(lctx, l)
}

// doError is Do's error when both fn and the release failed: one line, and errors.Is and
// errors.As see both.
type doError struct{ fn, release error }

func (e *doError) Error() string   { return e.fn.Error() + "; " + e.release.Error() }
func (e *doError) Unwrap() []error { return []error{e.fn, e.release} }

package primitives

import (
	"context"
)

// Mutex is a distributed mutual-exclusion lock: a Semaphore of limit 1. At most one lease on its
// key is held at a time across every process that shares the store. A Mutex is safe for
// concurrent use; it is not re-entrant (each Acquire is a new lease, with a new holder id unless
// WithHolder is set).
type Mutex struct {
	sem *Semaphore
}

// NewMutex returns a Mutex on key. It checks its arguments and options and returns an error
// wrapping ErrInvalid that names the bad one; it does not touch the store.
func NewMutex(store Store, key string, opts ...Option) (*Mutex, error) {
	s, err := newSemaphore(store, resource{kind: "mutex", key: key, limit: 1}, opts)
	if err != nil {
		return nil, err
	}
	return &Mutex{sem: s}, nil
}

// Key returns the resource key.
func (m *Mutex) Key() string { return m.sem.key }

// Acquire takes the lock, waiting as Semaphore.Acquire does, with the same errors and costs.
func (m *Mutex) Acquire(ctx context.Context) (Lease, error) { return m.sem.Acquire(ctx, 1) }

// TryAcquire makes exactly one attempt to take the lock: one store round trip. When it is held
// it returns an error wrapping ErrNotAcquired.
func (m *Mutex) TryAcquire(ctx context.Context) (Lease, error) { return m.sem.TryAcquire(ctx, 1) }

// Adopt takes over the lease holder holds on the key, as Semaphore.Adopt does.
func (m *Mutex) Adopt(ctx context.Context, holder string) (Lease, error) {
	return m.sem.Adopt(ctx, holder)
}

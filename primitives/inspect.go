package primitives

import (
	"context"
	"fmt"
)

// Status is what Inspect reports about a Mutex's or Semaphore's key.
type Status struct {
	// Limit is the limit of the Mutex (1) or Semaphore asking.
	Limit int
	// KeyLimit is the key's limit, that of its leases and waiters, as the store reports it: when
	// it is not Limit, this Semaphore's acquires are refused with ErrLimitMismatch. It is 0,
	// or the limit of the key's latest grant, when nobody holds or waits for the key.
	KeyLimit int
	// InUse is the number of permits held by unexpired leases; Closed, the number a lock delay
	// keeps closed after their leases expired unreleased (WithLockDelay); Free is
	// Limit − InUse − Closed, or 0 when more are in use.
	InUse, Closed, Free int
	// Leases are the unexpired leases, ordered by fence, with their holder ids, permits, fences
	// and the time they have left by the store's clock.
	Leases []LeaseInfo
	// Waiters are the waiters in the key's line, head first, with their permits and values. A
	// store without a line (Redlock) reports none.
	Waiters []WaiterInfo
	// Delayed are the leases that expired unreleased and whose lock delay still closes their
	// permits, with the time left until it ends (DelayInfo.Left) by the store's clock.
	Delayed []DelayInfo
}

// Inspect reports who holds the key and who waits for it: one store round trip that changes nothing
// (a key never used reports no leases and creates nothing). Expired leases appear only in Delayed, while a lock delay
// keeps their permits closed.
func (s *Semaphore) Inspect(ctx context.Context) (Status, error) {
	snap, err := s.store.Inspect(ctx, s.key)
	if err != nil {
		return Status{}, fmt.Errorf("leasehold: inspect %s: %w", quoteKey(s.key), err)
	}
	st := Status{Limit: s.limit, KeyLimit: snap.Limit, InUse: snap.InUse(), Closed: snap.Closed(),
		Leases: snap.Leases, Waiters: snap.Waiters, Delayed: snap.Delayed}
	st.Free = max(st.Limit-st.InUse-st.Closed, 0)
	return st, nil
}

// Inspect reports who holds the lock, as Semaphore.Inspect does.
func (m *Mutex) Inspect(ctx context.Context) (Status, error) { return m.sem.Inspect(ctx) }

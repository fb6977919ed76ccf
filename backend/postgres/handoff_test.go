package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// TestGrantsTakenFromNoticesAreTheDatabasesLeases: Mutexes of eight workers on four Stores take
// turns on one key, most grants handed over by a release and taken from its notice without a
// statement. Inside each turn the database holds exactly the worker's lease, at the fence the
// worker was given, the fences rise strictly from turn to turn, and no two workers are ever
// inside at once.
func TestGrantsTakenFromNoticesAreTheDatabasesLeases(t *testing.T) {
	testenv.SkipShort(t, "eight workers on four Stores take turns")
	t.Parallel()
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	stores := make([]*postgres.Store, 4)
	for i := range stores {
		stores[i] = newStore(t, url)
	}
	occ := conformance.NewOccupancy(1)
	var (
		mu   sync.Mutex
		last uint64
	)
	const workers, rounds = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			s := stores[w%len(stores)]
			m, err := primitives.NewMutex(s, key, primitives.WithTTL(time.Minute))
			if err != nil {
				t.Error(err)
				return
			}
			for range rounds {
				l, err := m.Acquire(ctx)
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				leave := occ.Enter(1)
				mu.Lock()
				if l.Fence() <= last {
					t.Errorf("fence %d after %d: not above it", l.Fence(), last)
				}
				last = max(last, l.Fence())
				mu.Unlock()
				snap, err := s.Inspect(ctx, key)
				if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != l.Holder() || snap.Leases[0].Fence != l.Fence() {
					t.Errorf("inside the turn of %s at fence %d the database holds %+v (%v)", l.Holder(), l.Fence(), snap.Leases, err)
				}
				leave()
				if err := l.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if v := occ.Violations(); len(v) > 0 {
		t.Errorf("two holders at once: %v", v)
	}
	pool := newPool(t, url)
	if got := keyRows(t, pool, key); got != noRows {
		t.Errorf("rows left:\n%s", got)
	}
}

package etcd_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// TestCanceledTryIsNotHeldAfterItsGiveBack: a TryAcquire whose ctx ends while it is in flight
// (0.2 to 4 ms) is given back by primitives (a Release of any fence of its drawn holder), which
// may find nothing while the try's transaction is still on its way. Should that transaction
// commit after, the key must not stay held by nobody for its TTL (a minute here): it is free
// again within moments, every time.
func TestCanceledTryIsNotHeldAfterItsGiveBack(t *testing.T) {
	t.Parallel()
	st, key := newStore(t), uniqueKey(t)
	m, err := primitives.NewMutex(st, key, primitives.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const tries = 400
	cut := 0
	for range tries {
		tctx, cancel := context.WithTimeout(ctx, 200*time.Microsecond+rand.N(3800*time.Microsecond))
		l, err := m.TryAcquire(tctx)
		cancel()
		if err == nil {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		cut++ // or refused: a try cut before may have landed since
		poll.Within(t, 3*time.Second, "the key free again after a canceled try's give-back", func() (string, bool) {
			snap, err := st.Inspect(ctx, key)
			if err != nil {
				return err.Error(), false
			}
			return fmt.Sprint(snap.Leases), len(snap.Leases) == 0
		})
	}
	t.Logf("%d of %d tries cut in flight", cut, tries)
}

package primitives_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/primitives"
)

// TestRefreshKeepsALeaseExtendedForLess: a refreshed lease that the caller extends for less than
// its TTL (so that its stop point comes before the refresh planned) is refreshed before its new
// stop point, and stays held, with or without a stop margin.
func TestRefreshKeepsALeaseExtendedForLess(t *testing.T) {
	for _, tc := range []struct{ margin, extend time.Duration }{
		{0, 500 * time.Millisecond}, {300 * time.Millisecond, time.Second}, {300 * time.Millisecond, 700 * time.Millisecond},
	} {
		margin := tc.margin
		t.Run(fmt.Sprintf("margin %v, extend %v", margin, tc.extend), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memory.New()
				m, err := primitives.NewMutex(store, "job", primitives.WithTTL(3*time.Second), primitives.WithStopMargin(margin))
				if err != nil {
					t.Fatal(err)
				}
				l, err := m.Acquire(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(100 * time.Millisecond)
				if _, err := l.Extend(context.Background(), tc.extend); err != nil {
					t.Fatal(err)
				}
				time.Sleep(10 * time.Second)
				synctest.Wait()
				select {
				case <-l.Done():
					t.Errorf("margin %v: the lease, extended for %v of its 3s TTL, was lost: %v; want it refreshed", margin, tc.extend, l.Err())
				default:
				}
				l.Release(context.Background())
			})
		})
	}
}

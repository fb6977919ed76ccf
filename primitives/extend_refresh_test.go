package primitives_test

import (
	"context"
	"fmt"
	"github.com/leasehold/leasehold/core"
	"sync/atomic"
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

// lostExtendReply is a Store whose Extends, while lose is set, reach the store and go through,
// and are answered with errNetwork: a reply lost on the way; while fail is set, they fail without
// reaching it.
type lostExtendReply struct {
	core.Store
	lose, fail *atomic.Bool
}

func (s lostExtendReply) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	if s.fail.Load() {
		return core.ExtendResult{}, errNetwork
	}
	res, err := s.Store.Extend(ctx, req)
	if err == nil && s.lose.Load() {
		return core.ExtendResult{}, errNetwork
	}
	return res, err
}

// noSecondHolder checks, every 100 ms for d, that another Mutex on store takes the key only
// once l has reported its loss.
func noSecondHolder(t *testing.T, store core.Store, l core.Lease, d time.Duration, what string) {
	t.Helper()
	other := mustMutex(t, store, primitives.WithTTL(time.Minute))
	for range d / (100 * time.Millisecond) {
		time.Sleep(100 * time.Millisecond)
		o, err := other.TryAcquire(context.Background())
		if err != nil {
			continue
		}
		defer o.Release(context.Background())
		if l.Err() == nil {
			t.Fatalf("another Mutex took the key (fence %d) while the lease (fence %d) holds it, %s", o.Fence(), l.Fence(), what)
		}
		return
	}
}

// TestRefreshWhoseReplyIsLostAfterALongerExtendMakesNoSecondHolder: a lease extended for longer
// than its TTL, whose next refresh (for its TTL) goes through with its reply lost and whose
// refreshes then fail: the store ends it a TTL after that refresh, and the lease must be
// reported lost by then, not at the longer Extend's deadline.
func TestRefreshWhoseReplyIsLostAfterALongerExtendMakesNoSecondHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := memory.New()
		lose, fail := new(atomic.Bool), new(atomic.Bool)
		l := mustAcquire(t, mustMutex(t, lostExtendReply{inner, lose, fail}, primitives.WithTTL(10*time.Second)))
		if _, err := l.Extend(context.Background(), time.Minute); err != nil {
			t.Fatal(err)
		}
		lose.Store(true)
		time.Sleep(5 * time.Second) // a refresh, every third of the TTL
		fail.Store(true)
		noSecondHolder(t, inner, l, time.Minute, "its refresh's reply lost after an Extend for a minute")
		l.Release(context.Background())
	})
}

// TestExtendForLessWhoseReplyIsLostMakesNoSecondHolder: Lease.Extend for less than the lease's
// TTL went through in the store, its reply lost: the store now ends the lease that much sooner.
// The lease must not count on its old deadline: it is refreshed before the shorter TTL runs out,
// or (without refreshes) reported lost by then, so that no other Mutex takes the key while the
// lease's Err is nil.
func TestExtendForLessWhoseReplyIsLostMakesNoSecondHolder(t *testing.T) {
	for name, opts := range map[string][]primitives.Option{
		"refreshed":       nil,
		"without refresh": {primitives.WithoutRefresh()},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inner := memory.New()
				lose := new(atomic.Bool)
				store := lostExtendReply{inner, lose, new(atomic.Bool)}
				l := mustAcquire(t, mustMutex(t, store, append(opts, primitives.WithTTL(time.Minute))...))
				time.Sleep(time.Second)
				lose.Store(true)
				if _, err := l.Extend(context.Background(), 5*time.Second); err == nil {
					t.Fatal("Extend whose reply was lost = nil; want its error")
				}
				lose.Store(false)
				noSecondHolder(t, inner, l, 30*time.Second, "extended for 5s with the reply lost")
				l.Release(context.Background())
			})
		})
	}
}

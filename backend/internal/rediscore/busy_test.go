package rediscore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// TestBusyKeyHandoffs: callers on one Store and on three hand a lock over hundreds of
// times, each Acquire under a fresh holder id (so each Store records hundreds of floors and
// keeps the grants its releases make to the others' waiters), and a quarter of the callers give
// up after a few milliseconds: during the try, between the refused try and enrolling, or while
// enrolled. Inside each lease the lock is the caller's alone, its fence above every earlier
// one, and it is not lost; afterwards the lock is free and the line empty (a grant to a caller
// that gave up is given back within reclaimAfter, not held until the one-minute TTL).
func TestBusyKeyHandoffs(t *testing.T) {
	testenv.SkipShort(t, "a stress test: hundreds of handoffs on each driver")
	t.Parallel()
	for _, stores := range []int{1, 3} {
		t.Run(fmt.Sprint(stores, " stores"), func(t *testing.T) {
			eachDriver(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
				const key, callers, rounds = "busy", 4, 60
				ctx := context.Background()
				var (
					inside    atomic.Int32
					lastFence atomic.Uint64
					granted   atomic.Int32
					wg        sync.WaitGroup
				)
				for i := range stores {
					s := mk()
					for j := range callers {
						m, _ := primitives.NewMutex(s, key, primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(45*time.Second))
						wg.Add(1)
						go func() {
							defer wg.Done()
							for r := range rounds {
								actx, cancel := ctx, context.CancelFunc(func() {})
								if (r+j+i)%4 == 0 {
									actx, cancel = context.WithTimeout(ctx, time.Duration(1+r%5)*time.Millisecond)
								}
								l, err := m.Acquire(actx)
								cancel()
								if err != nil {
									if actx == ctx || !errors.Is(err, context.DeadlineExceeded) {
										t.Errorf("store %d caller %d round %d: Acquire: %v", i, j, r, err)
										return
									}
									continue
								}
								granted.Add(1)
								if n := inside.Add(1); n != 1 {
									t.Errorf("%d callers inside the lock", n)
								}
								if f := l.Fence(); f <= lastFence.Load() {
									t.Errorf("fence %d not above the last one, %d", f, lastFence.Load())
								} else {
									lastFence.Store(f)
								}
								if r%8 == 0 {
									snap, err := s.Inspect(ctx, key)
									if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != l.Holder() {
										t.Errorf("inside %s's lease the lock is held by %+v (%v)", l.Holder(), snap.Leases, err)
									}
								}
								inside.Add(-1)
								if err := l.Release(ctx); err != nil {
									t.Errorf("Release: %v", err)
								}
							}
						}()
					}
				}
				wg.Wait()
				if t.Failed() {
					return
				}
				t.Logf("%d leases granted", granted.Load())
				probe := mk()
				poll.Until(t, "the lock free and the line empty", func() bool {
					snap, err := probe.Inspect(ctx, key)
					return err == nil && len(snap.Leases) == 0 && lineLen(t, addr, key) == 0
				})
			})
		})
	}
}

// TestGiveUpOnABusyStoreIsGivenBack: a Store that has recorded hundreds of floors (its
// callers' tries and releases) and keeps the grants its releases made to another Store's
// waiters sees a caller refused and gone before enrolling, under a holder id it had released
// under before (a floor above every fence) and whose grant through the other Store it kept from
// a reply; the line's grant to it, heard on the Store's channel, is given back, and the next in line
// gets the lock.
func TestGiveUpOnABusyStoreIsGivenBack(t *testing.T) {
	testenv.SkipShort(t, "hundreds of calls to make the Store busy, then a give-back delay")
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			g, other, next := mk(t, srv.Addr), mk(t, srv.Addr), mk(t, srv.Addr)
			ctx := context.Background()
			const key = "busy-gone"
			req := func(holder string, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: wait}
			}
			release := func(s core.Store, holder string) {
				t.Helper()
				if _, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: holder}); err != nil {
					t.Fatal(err)
				}
			}
			// g subscribes to its channel of the key (a refused try that waits), then its callers
			// acquire and release under 200 holder ids, each release granting a waiter of other's.
			mustAcquire(t, other, req("first", 0), true)
			mustAcquire(t, g, req("sub", time.Minute), false)
			release(other, "first")
			release(g, "sub")
			for i := range 200 {
				h, o := fmt.Sprint("g-", i), fmt.Sprint("o-", i)
				mustAcquire(t, g, req(h, time.Minute), true)
				mustAcquire(t, other, req(o, time.Minute), false)
				release(g, h) // grants o, in its reply: g keeps the grant
				mustAcquire(t, other, req(o, time.Minute), true)
				release(other, o)
				if i == 150 {
					// "gone" held and released through g (its floor there is above every fence), then
					// waited through other and was granted the lock by a release of g's, whose reply
					// g keeps the grant from.
					mustAcquire(t, g, req("gone", time.Minute), true)
					release(g, "gone")
					mustAcquire(t, g, req("x", 0), true)
					mustAcquire(t, other, req("gone", time.Minute), false)
					release(g, "x")
					release(other, "gone")
				}
			}
			mustAcquire(t, other, req("holder", 0), true)
			mustAcquire(t, g, req("gone", time.Minute), false) // refused, in line, and never enrolls
			mustAcquire(t, next, req("next", time.Minute), false)
			w, err := next.Register(ctx, req("next", time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			// g's grant must reach g's Store, and next's its waiter: g, other and next subscribed.
			poll.Until(t, "g, other and next subscribed to the key's channel", func() bool { return subscribers(t, srv.Addr, key) == 3 })
			release(other, "holder")
			poll.Until(t, "next granted the lock", func() bool {
				snap, err := other.Inspect(ctx, key)
				return err == nil && len(snap.Leases) == 1 && snap.Leases[0].Holder == "next"
			})
		})
	}
}

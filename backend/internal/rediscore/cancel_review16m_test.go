package rediscore_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// Adversarial review of issue 16 as a whole (review16m): a waiter's ctx ending at any moment.

// TestCanceledWaitersStrandNothing_review16m: a waiter's ctx ends at a random moment (before its
// try, while the try is out, between the refusal and its enrolling, while it waits, as the
// line grants it the lease, as it takes the grant from the message) while the holder releases at
// another random moment, on both drivers and mixed, with ctx canceled (the direct path of
// go-redis, valkey's graceCtx) and with a deadline (go-redis's call goroutine, valkey-go's
// deadline). Whatever the waiter's Acquire returned, once its lease (if any) is released and
// the background leaves and give-backs are done, the key is free: no lease nobody will release
// (held until its TTL, a minute) and no place nobody will leave.
func TestCanceledWaitersStrandNothing_review16m(t *testing.T) {
	eachDriver(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		a, b, observer := mk(), mk(), mk()
		opts := []primitives.Option{primitives.WithTTL(time.Minute)}
		ma, err := primitives.NewMutex(a, "cancel", opts...)
		if err != nil {
			t.Fatal(err)
		}
		mb, err := primitives.NewMutex(b, "cancel", opts...)
		if err != nil {
			t.Fatal(err)
		}
		rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
		ctx := context.Background()
		for i := range 40 {
			held, err := ma.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cancelAt := time.Duration(rnd.IntN(4000)) * time.Microsecond
			releaseAt := time.Duration(rnd.IntN(4000)) * time.Microsecond
			var wctx context.Context
			var cancel context.CancelFunc
			if rnd.IntN(2) == 0 {
				wctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(cancelAt, cancel)
			} else {
				wctx, cancel = context.WithTimeout(ctx, cancelAt)
			}
			got := make(chan core.Lease, 1)
			go func() {
				l, err := mb.Acquire(wctx)
				if err != nil {
					l = nil
				}
				got <- l
			}()
			time.AfterFunc(releaseAt, func() { held.Release(ctx) })
			if l := <-got; l != nil {
				if err := l.Release(ctx); err != nil {
					t.Errorf("round %d: Release of the waiter's lease: %v", i, err)
				}
			}
			cancel()
			pollUntil(t, func() bool {
				select {
				case <-held.Done():
				default:
					return false
				}
				snap, err := observer.Inspect(ctx, "cancel")
				if err != nil {
					t.Fatal(err)
				}
				return len(snap.Leases) == 0 && len(snap.Waiters) == 0
			})
		}
	})
}

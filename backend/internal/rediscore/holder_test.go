package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// TestReusedHolderWaitersAllWake: two concurrent Acquire calls under one WithHolder id
// wait in one Store. Such calls share one lease (WithHolder's doc), so when the holder releases
// and the line grants the id its lease, both must return promptly, as they do on the memory
// store. The subscriptions kept one waiter per holder (c.waiters[holder] = w): the second Register
// replaces the first, whose wake never comes, and it sleeps until the store's RetryAfter (the
// old lease's expiry) or its acquire timeout.
func TestReusedHolderWaitersAllWake(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			ctx := context.Background()
			a, b := mk(t, srv.Addr), watch(mk(t, srv.Addr))
			owner, _ := primitives.NewMutex(a, "shared", primitives.WithTTL(time.Minute))
			l, err := owner.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			m, _ := primitives.NewMutex(b, "shared", primitives.WithTTL(time.Minute),
				primitives.WithHolder("same-id"), primitives.WithAcquireTimeout(5*time.Second))
			type out struct {
				l   core.Lease
				err error
				at  time.Time
			}
			res := make(chan out, 2)
			for range 2 {
				go func() {
					l, err := m.Acquire(ctx)
					res <- out{l, err, time.Now()}
				}()
			}
			pollUntil(t, func() bool { return lineLen(t, srv.Addr, "shared") == 1 })
			pollUntil(t, func() bool { return b.registered() == 2 && b.settled() }) // both enrolled, subscriptions confirmed
			released := time.Now()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				o := <-res
				if o.err != nil {
					t.Errorf("a waiter under the shared holder id: %v after %v", o.err, o.at.Sub(released).Round(time.Millisecond))
					continue
				}
				if d := o.at.Sub(released); d > time.Second {
					t.Errorf("a waiter under the shared holder id returned %v after the release", d.Round(time.Millisecond))
				}
				o.l.StopRefresh()
			}
		})
	}
}

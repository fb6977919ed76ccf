package rediscore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// TestReusedHolderWaitersAllWake: two concurrent Acquire calls under one WithHolder id
// wait in one Store. Such calls share one lease (WithHolder's doc), so when the holder releases
// and the line grants the id its lease, both must return promptly, as they do on the memory
// store. The Store's waiters kept one per holder (c.waiters[holder] = w): the second Register
// replaces the first, whose wake never comes, and it sleeps until the store's RetryAfter (the
// old lease's expiry) or its acquire timeout.
func TestReusedHolderWaitersAllWake(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
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
				primitives.WithHolder("same-id"), primitives.WithAcquireTimeout(30*time.Second))
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
			poll.Until(t, "the shared holder in line", func() bool { return lineLen(t, srv.Addr, "shared") == 1 })
			poll.Until(t, "both waiters enrolled and subscribed", func() bool { return b.registered() == 2 && b.settled() }) // both enrolled, subscriptions confirmed
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
				// Promptly: a waiter not woken would sleep until the old lease's expiry, a minute.
				if d := o.at.Sub(released); d > 10*time.Second {
					t.Errorf("a waiter under the shared holder id returned %v after the release", d.Round(time.Millisecond))
				}
				o.l.StopRefresh()
			}
		})
	}
}

// TestConcurrentCloseOfHolderWaitersLeaves: waiters under one holder id (one WithHolder id
// shared by several goroutines) close at once. lineWaiter.Close once decided whether it was the
// holder's last waiter (and so owed the leave) under s.mu, but removed itself from the channel in
// a second critical section: two Closes that both look before either removes each see the
// other and neither leaves. The holder's place stays in the line for its whole wait (here a
// minute), and when it reaches the head the grant sits untaken until the Store reclaims it.
func TestConcurrentCloseOfHolderWaitersLeaves(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := redisharness.Drivers["goredis"](t, srv.Addr)
	ctx := context.Background()
	for i := range 200 {
		key := fmt.Sprintf("concurrent-close-%d", i)
		mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "owner", Permits: 1, Limit: 1, TTL: time.Minute}, true)
		req := core.AcquireRequest{Key: key, Holder: "shared", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
		mustAcquire(t, s, req, false)
		var ws []core.Wake
		for range 8 {
			w, err := s.Register(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
		var start, wg sync.WaitGroup
		start.Add(1)
		for _, w := range ws {
			wg.Go(func() { start.Wait(); w.Close() })
		}
		start.Done()
		wg.Wait()
		// Else the place stays for its wait of a minute.
		poll.Until(t, fmt.Sprintf("round %d: holder %q's place left once all its waiters closed", i, req.Holder), func() bool {
			return zcard(t, srv.Addr, key, 1) == 0
		})
	}
}

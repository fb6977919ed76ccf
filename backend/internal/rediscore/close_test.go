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
)

// TestConcurrentCloseOfHolderWaitersLeaves: waiters under one holder id (one WithHolder id
// shared by several goroutines) close at once. lineWaiter.Close once decided whether it was the
// holder's last waiter (and so owed the leave) under s.mu, but removed itself from the channel in
// a second critical section: two Closes that both look before either removes each see the
// other and neither leaves. The holder's place stays in the line for its whole wait (here a
// minute), and when it reaches the head the grant sits untaken until the Store reclaims it.
func TestConcurrentCloseOfHolderWaitersLeaves(t *testing.T) {
	srv := redistest.StartServer(t)
	s := redisharness.Drivers["goredis"](t, srv.Addr)
	ctx := context.Background()
	for i := range 200 {
		key := fmt.Sprintf("concurrent-close-%d", i)
		mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "owner", Permits: 1, Limit: 1, TTL: time.Minute}, true)
		req := core.AcquireRequest{Key: key, Holder: "shared", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
		mustAcquire(t, s, req, false)
		var ws []core.Waiter
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
		deadline := time.Now().Add(2 * time.Second)
		for zcard(t, srv.Addr, key, 1) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: all waiters of holder %q closed, yet its place is still in the line after 2s (it stays for its wait of a minute)", i, req.Holder)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

package redlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/redlock"
)

// TestOverlappingReacquiresByOneHolderLeaveItsLeaseOnAQuorum: a holder's lease is on three of
// five nodes (two were down). Two re-acquires of that holder overlap: the first finds the lease
// on its three nodes and fresh grants on the other two, which it gives back, slowly; the second,
// to which one of the three nodes answers late, finds those fresh grants before they are given
// back. Both are granted, and afterwards the holder's lease is on a quorum at the fence the last
// one returned: Extend reports it.
func TestOverlappingReacquiresByOneHolderLeaveItsLeaseOnAQuorum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var phase atomic.Int32
		before := func(ctx context.Context, i int, op string) error {
			switch {
			case phase.Load() == 0 && i >= 3:
				return errDown
			case phase.Load() == 2 && op == "acquire" && i == 0:
				time.Sleep(50 * time.Millisecond) // the second re-acquire's answer from node 0 comes late
			case op == "release" && i >= 3:
				time.Sleep(20 * time.Millisecond) // the give-back of the fresh grants is slow
			}
			return nil
		}
		_, ss := scriptedNodes(5, before, nil)
		s := mustNew(t, ss, redlock.WithNodeTimeout(time.Second))
		ctx := context.Background()
		req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
		first, err := s.Acquire(ctx, req)
		if err != nil || !first.Granted {
			t.Fatalf("acquire with two nodes down: %+v %v", first, err)
		}
		time.Sleep(time.Millisecond) // the re-acquires' floors are above the lease's fence
		phase.Store(1)
		var wg sync.WaitGroup
		var one, two core.AcquireResult
		var err1, err2 error
		wg.Go(func() { one, err1 = s.Acquire(ctx, req) })
		synctest.Wait() // the first re-acquire's grants are made; its give-back is under way
		time.Sleep(time.Millisecond)
		phase.Store(2)
		wg.Go(func() { two, err2 = s.Acquire(ctx, req) })
		wg.Wait()
		time.Sleep(time.Second) // fake time: every straggler and give-back has ended
		synctest.Wait()
		if err1 != nil || !one.Granted || err2 != nil || !two.Granted {
			t.Fatalf("overlapping re-acquires: %+v %v, %+v %v; want both granted", one, err1, two, err2)
		}
		ext, err := s.Extend(ctx, core.ExtendRequest{Key: "k", Holder: "a", TTL: time.Minute})
		if err != nil || ext.Fence != two.Fence {
			t.Errorf("Extend after re-acquires at fences %d then %d: %+v, %v; want the lease at %d", one.Fence, two.Fence, ext, err, two.Fence)
		}
	})
}

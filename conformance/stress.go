package conformance

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// testConcurrentHoldersNeverExceedLimit runs workers on Stores of their own (processes, in
// effect) that acquire and release on two keys, a semaphore and a mutex, and counts the holders
// actually inside at once.
func (s *suite) testConcurrentHoldersNeverExceedLimit(t *testing.T) {
	const (
		workers = 8
		limit   = 3
		rounds  = 40
	)
	semKey, muKey := newKey(t), newKey(t)
	var (
		inUse, maxInUse atomic.Int64
		muInside        atomic.Int64
		muLast          atomic.Uint64           // the race detector sees no order through a remote store
		fails           = make(chan string, 64) // the first failures; the rest are counted
		dropped         atomic.Int64
		wg              sync.WaitGroup
	)
	fail := func(msg string) {
		select {
		case fails <- msg:
		default:
			dropped.Add(1)
		}
	}
	for w := range workers {
		st := s.h.NewStore(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				holder := fmt.Sprintf("w%d-r%d", w, r)
				n := 1 + (w+r)%2
				if err := acquireWait(t, st, semKey, holder, n, limit); err != nil {
					fail(err.Error())
					return
				}
				now := inUse.Add(int64(n))
				for m := maxInUse.Load(); now > m && !maxInUse.CompareAndSwap(m, now); m = maxInUse.Load() {
				}
				if now > limit {
					fail(fmt.Sprintf("%d permits in use at once, limit %d", now, limit))
				}
				time.Sleep(time.Millisecond) // hold a moment, so that holders overlap
				if r%2 == 0 {
					if err := acquireWait(t, st, muKey, holder, 1, 1); err != nil {
						fail(err.Error())
						return
					}
					if muInside.Add(1) != 1 {
						fail("two holders inside the mutex at once")
					}
					snap, err := st.Inspect(ctxFor(t), muKey)
					if err != nil {
						fail(err.Error())
					}
					f := holders(snap)[holder].Fence
					if last := muLast.Swap(f); f <= last {
						fail(fmt.Sprintf("mutex fence %d not above the previous holder's %d", f, last))
					}
					muInside.Add(-1)
					if _, err := st.Release(ctxFor(t), core.ReleaseRequest{Key: muKey, Holder: holder, Fence: f}); err != nil {
						fail(err.Error())
					}
				}
				inUse.Add(-int64(n))
				if _, err := st.Release(ctxFor(t), core.ReleaseRequest{Key: semKey, Holder: holder}); err != nil {
					fail(err.Error())
				}
			}
		}()
	}
	wg.Wait()
	close(fails)
	for f := range fails {
		t.Error(f)
	}
	if n := dropped.Load(); n > 0 {
		t.Errorf("and %d more failures", n)
	}
	if m := maxInUse.Load(); m < limit {
		t.Errorf("at most %d permits were in use at once, limit %d: the workers did not overlap enough to test anything", m, limit)
	}
}

// acquireWait acquires, waiting by notification when the store has it and by the store's
// RetryAfter capped at a millisecond otherwise.
func acquireWait(t *testing.T, st core.Store, key, holder string, n, limit int) error {
	req := core.AcquireRequest{Key: key, Holder: holder, Permits: n, Limit: limit, TTL: time.Minute, Wait: 20 * time.Second}
	var w core.Waiter
	if nt, ok := st.(core.Notifier); ok {
		var err error
		if w, err = nt.Register(ctxFor(t), req); err != nil {
			return fmt.Errorf("Register(%q): %v", key, err)
		}
		defer w.Close(false)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		res, err := st.Acquire(ctxFor(t), req)
		if err != nil {
			return fmt.Errorf("Acquire(%q): %v", key, err)
		}
		if res.Granted {
			return nil
		}
		var wake <-chan struct{}
		if w != nil {
			wake = w.C()
		}
		select {
		case <-wake:
		case <-time.After(min(max(res.RetryAfter, 0), time.Millisecond)):
		}
	}
	return fmt.Errorf("holder %s waited 20s for %d permits of %q", holder, n, key)
}

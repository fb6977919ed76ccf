package conformance

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// testConcurrentHoldersNeverExceedLimit runs workers on Stores of their own (processes, in
// effect) that acquire and release on two keys, a semaphore and a mutex, and counts the holders
// actually inside at once with an Occupancy of each. Each worker makes 20 rounds, or 40 under
// WithSoak(true).
func (s *suite) testConcurrentHoldersNeverExceedLimit(t *testing.T) {
	const (
		workers = 8
		limit   = 3
	)
	rounds := s.stressRounds()
	semKey, muKey := newKey(t), newKey(t)
	var (
		sem     = NewOccupancy(limit)
		mu      = NewOccupancy(1)
		muLast  atomic.Uint64           // the race detector sees no order through a remote store
		fails   = make(chan string, 64) // the first failures; the rest are counted
		dropped atomic.Int64
		wg      sync.WaitGroup
	)
	fail := func(msg string) {
		select {
		case fails <- msg:
		default:
			dropped.Add(1)
		}
	}
	// failed says the test has failed already: a worker waiting on a store that stranded its
	// permits (a broken one) then stops, instead of waiting out its 20 s.
	failed := func() bool {
		return len(fails) > 0 || len(sem.Violations()) > 0 || len(mu.Violations()) > 0
	}
	for w := range workers {
		st := s.h.NewStore(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				holder := fmt.Sprintf("w%d-r%d", w, r)
				n := 1 + (w+r)%2
				if err := at(t, st, semKey).acquireWait(holder, n, limit, failed); err != nil {
					if err != errStopped {
						fail(err.Error())
					}
					return
				}
				leaveSem := sem.Enter(n)
				time.Sleep(time.Millisecond) // hold a moment, so that holders overlap
				if r%2 == 0 {
					if err := at(t, st, muKey).acquireWait(holder, 1, 1, failed); err != nil {
						if err != errStopped {
							fail(err.Error())
						}
						return
					}
					leaveMu := mu.Enter(1)
					snap, err := st.Inspect(ctxFor(t), muKey)
					if err != nil {
						fail(err.Error())
					}
					f := holders(snap)[holder].Fence
					if last := muLast.Swap(f); f <= last {
						fail(fmt.Sprintf("mutex fence %d not above the previous holder's %d", f, last))
					}
					leaveMu()
					if _, err := st.Release(ctxFor(t), core.ReleaseRequest{Key: muKey, Holder: holder, Fence: f}); err != nil {
						fail(err.Error())
					}
				}
				leaveSem()
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
	if v := sem.Violations(); len(v) > 0 {
		t.Errorf("the semaphore let more permits in than its limit %d times; the first: %v", len(v), v[0])
	}
	if v := mu.Violations(); len(v) > 0 {
		t.Errorf("the mutex let two holders in at once %d times", len(v))
	}
	if m := sem.Peak(); m < limit {
		t.Errorf("at most %d permits were in use at once, limit %d: the workers did not overlap enough to test anything", m, limit)
	}
}

// errStopped is acquireWait's error when stop told it to give up.
var errStopped = errors.New("stopped: the test has failed")

// acquireWait acquires, waiting by notification when the store has it (and the store's
// RetryAfter capped at 20 ms) and by the RetryAfter capped at a millisecond otherwise, for up to
// 20 s or until stop reports true.
func (k keyAt) acquireWait(holder string, n, limit int, stop func() bool) error {
	t, st, key := k.t, k.st, k.key
	req := k.request(holder, n, limit, time.Minute)
	req.Wait = 20 * time.Second
	// With notifications a worker waits to be woken; its polling every 20 ms only bounds a missed
	// wake (the notification tests check wakes), and spares a slow backend (miniredis runs its
	// scripts in the test's process) eight workers' tries every millisecond.
	var w core.Waiter
	every := time.Millisecond
	if nt, ok := st.(core.Notifier); ok {
		every = 20 * time.Millisecond
		var err error
		if w, err = nt.Register(ctxFor(t), req); err != nil {
			return fmt.Errorf("Register(%q): %v", key, err)
		}
		defer w.Close()
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if stop() {
			return errStopped
		}
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
		case <-time.After(min(max(res.RetryAfter, 0), every)):
		}
	}
	return fmt.Errorf("holder %s waited 20s for %d permits of %q", holder, n, key)
}

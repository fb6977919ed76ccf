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
// WithSoak(true), and more until the semaphore has been full once.
func (s *suite) testConcurrentHoldersNeverExceedLimit(t *testing.T) {
	const workers = 8
	rounds := s.stressRounds()
	x := &stress{t: t, semKey: newKey(t), muKey: newKey(t), sem: NewOccupancy(stressLimit), mu: NewOccupancy(1),
		fails: make(chan string, 64)}
	var wg sync.WaitGroup
	for w := range workers {
		st := s.h.NewStore(t)
		wg.Go(func() {
			// More rounds, up to four times as many, until the semaphore has been full once:
			// on a slow store the workers may not overlap enough in the first ones.
			for r := 0; r < rounds || (x.sem.Peak() < stressLimit && r < 4*rounds); r++ {
				if !x.round(st, fmt.Sprintf("w%d-r%d", w, r), 1+(w+r)%2, r%2 == 0) {
					return
				}
			}
		})
	}
	wg.Wait()
	close(x.fails)
	for f := range x.fails {
		t.Error(f)
	}
	if n := x.dropped.Load(); n > 0 {
		t.Errorf("and %d more failures", n)
	}
	if v := x.sem.Violations(); len(v) > 0 {
		t.Errorf("the semaphore let more permits in than its limit %d times; the first: %v", len(v), v[0])
	}
	if v := x.mu.Violations(); len(v) > 0 {
		t.Errorf("the mutex let two holders in at once %d times", len(v))
	}
	if m := x.sem.Peak(); m < stressLimit {
		t.Errorf("at most %d permits were in use at once, limit %d: the workers did not overlap enough to test anything", m, stressLimit)
	}
}

// stressLimit is the stress test's semaphore's limit.
const stressLimit = 3

// stress is one run of testConcurrentHoldersNeverExceedLimit: its two keys, the holders inside
// each at once, and its failures.
type stress struct {
	t             *testing.T
	semKey, muKey string
	sem, mu       *Occupancy
	muLast        atomic.Uint64 // the race detector sees no order through a remote store
	fails         chan string   // the first failures; the rest are counted
	dropped       atomic.Int64
}

func (x *stress) fail(msg string) {
	select {
	case x.fails <- msg:
	default:
		x.dropped.Add(1)
	}
}

// failed says the test has failed already: a worker waiting on a store that stranded its
// permits (a broken one) then stops, instead of waiting out its 20 s.
func (x *stress) failed() bool {
	return len(x.fails) > 0 || len(x.sem.Violations()) > 0 || len(x.mu.Violations()) > 0
}

// round takes n permits of the semaphore as holder on st, and the mutex too when mutex is
// set, holds them a moment and releases them. It reports false when the worker is to stop.
func (x *stress) round(st core.Store, holder string, n int, mutex bool) bool {
	t := x.t
	if err := at(t, st, x.semKey).acquireWait(holder, n, stressLimit, x.failed); err != nil {
		if err != errStopped {
			x.fail(err.Error())
		}
		return false
	}
	leaveSem := x.sem.Enter(n)
	time.Sleep(time.Millisecond) // hold a moment, so that holders overlap
	if mutex && !x.holdMutex(st, holder) {
		return false
	}
	leaveSem()
	if _, err := st.Release(ctxFor(t), core.ReleaseRequest{Key: x.semKey, Holder: holder}); err != nil {
		x.fail(err.Error())
	}
	return true
}

// holdMutex takes the mutex as holder on st, checks that its fence is above the previous
// holder's, and releases it. It reports false when the worker is to stop.
func (x *stress) holdMutex(st core.Store, holder string) bool {
	t := x.t
	if err := at(t, st, x.muKey).acquireWait(holder, 1, 1, x.failed); err != nil {
		if err != errStopped {
			x.fail(err.Error())
		}
		return false
	}
	leaveMu := x.mu.Enter(1)
	snap, err := st.Inspect(ctxFor(t), x.muKey)
	if err != nil {
		x.fail(err.Error())
	}
	f := holders(snap)[holder].Fence
	if last := x.muLast.Swap(f); f <= last {
		x.fail(fmt.Sprintf("mutex fence %d not above the previous holder's %d", f, last))
	}
	leaveMu()
	if _, err := st.Release(ctxFor(t), core.ReleaseRequest{Key: x.muKey, Holder: holder, Fence: f}); err != nil {
		x.fail(err.Error())
	}
	return true
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
	var w core.Wake
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

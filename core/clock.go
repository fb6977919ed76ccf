package core

import (
	"sync"
	"time"
)

// Clock tells the time a Store decides expiry by. Drivers for servers use the server's clock
// instead; the in-memory store takes a Clock so tests can move time by hand.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// SystemClock is the Clock of the machine: time.Now, read at each call (nothing is cached), so
// inside a testing/synctest bubble it follows the bubble's fake time. Its zero value is the
// clock: SystemClock{}.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to: forwards with Advance, and backwards too,
// to imitate a clock jump. The zero value is not usable; make one with NewManualClock. It is safe
// for concurrent use.
//
// It is for a store's own notion of time in driver and store tests: expiry, RetryAfter, fences,
// a clock jump. It does not drive leases: a lease's refresh and deadline timers, and a waiter's
// timers, run on the time package's clock. Advancing a ManualClock past a lease's expiry frees
// the lease in the store, but the lease learns of it only at its next refresh in real time, and
// under primitives.WithoutRefresh not before its real-time deadline. To test code that holds
// leases on fake time, run it in a testing/synctest bubble over a store on SystemClock{} instead:
// there leases, refreshes, waiters and expiry all follow the bubble's clock.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a ManualClock that reads start until it is moved.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start}
}

// Now returns the clock's current reading.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d; a negative d moves it backwards.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t, forwards or backwards.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

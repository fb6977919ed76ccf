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

// SystemClock is the Clock of the machine: time.Now. Inside a testing/synctest bubble it follows
// the bubble's fake time.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to: forwards with Advance, and backwards too,
// to imitate a clock jump. The zero value is not usable; make one with NewManualClock. It is safe
// for concurrent use.
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

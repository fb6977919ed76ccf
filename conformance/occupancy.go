package conformance

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Occupancy checks exclusion from outside a lock: callers that hold the lock enter it with the
// permits they hold and leave when they let go, and it keeps the most that were ever inside at once
// and each entry that took the count past a limit. The suite's stress test uses one; so can any
// test that wants to know whether a Mutex or Semaphore let too many in. A holder must enter only
// once it holds the lock and leave before it releases, or the count includes time it was not
// inside.
//
// The zero value is ready to use and has no limit: it keeps the peak and records no violations. An
// Occupancy is safe for concurrent use and must not be copied after first use.
type Occupancy struct {
	limit int64 // 0: none
	// inside is the count, one atomic counter, and peak is raised by compare-and-swap, so an
	// entry is never lost to a concurrent one and the peak is exactly the highest count reached.
	inside     atomic.Int64
	peak       atomic.Int64
	mu         sync.Mutex
	violations []Violation // guarded by mu
}

// Violation is one entry that took an Occupancy past its limit.
type Violation struct {
	Inside int // the count just after the entry
	Limit  int
}

func (v Violation) String() string {
	return fmt.Sprintf("%d inside at once, limit %d", v.Inside, v.Limit)
}

// NewOccupancy returns an Occupancy that records a Violation for every entry after which more
// than limit are inside. A limit of 0 or less means none.
func NewOccupancy(limit int) *Occupancy {
	return &Occupancy{limit: int64(max(limit, 0))}
}

// Enter records n more inside (a holder's permits; 1 for a mutex) and returns the func that
// records them leaving. Calling release again does nothing. Enter panics if n is not positive,
// which is a bug in the test. It costs two atomic operations, and a lock only on a violation.
func (o *Occupancy) Enter(n int) (release func()) {
	if n <= 0 {
		panic(fmt.Sprintf("conformance: Occupancy.Enter(%d): n must be positive", n))
	}
	now := o.inside.Add(int64(n))
	for p := o.peak.Load(); now > p && !o.peak.CompareAndSwap(p, now); p = o.peak.Load() {
	}
	if o.limit > 0 && now > o.limit {
		o.mu.Lock()
		o.violations = append(o.violations, Violation{Inside: int(now), Limit: int(o.limit)})
		o.mu.Unlock()
	}
	var left atomic.Bool
	return func() {
		if !left.Swap(true) {
			o.inside.Add(-int64(n))
		}
	}
}

// Inside returns how many are inside now.
func (o *Occupancy) Inside() int { return int(o.inside.Load()) }

// Peak returns the most that were inside at once so far.
func (o *Occupancy) Peak() int { return int(o.peak.Load()) }

// Violations returns a copy of the violations so far, in the order they were recorded: empty
// if the limit was always kept or there is none.
func (o *Occupancy) Violations() []Violation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Violation(nil), o.violations...)
}

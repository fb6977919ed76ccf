package conformance_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/primitives"
)

func TestOccupancyKeepsPeakAndViolations(t *testing.T) {
	o := conformance.NewOccupancy(3)
	a := o.Enter(2)
	b := o.Enter(1)
	if o.Inside() != 3 || o.Peak() != 3 || len(o.Violations()) != 0 {
		t.Fatalf("3 of 3 inside: inside %d, peak %d, violations %v; want 3, 3, none", o.Inside(), o.Peak(), o.Violations())
	}
	c := o.Enter(2)
	a()
	a() // a second release changes nothing
	b()
	c()
	if o.Inside() != 0 || o.Peak() != 5 {
		t.Errorf("after all left: inside %d, peak %d; want 0 and 5", o.Inside(), o.Peak())
	}
	if v := o.Violations(); len(v) != 1 || v[0] != (conformance.Violation{Inside: 5, Limit: 3}) || v[0].String() != "5 inside at once, limit 3" {
		t.Errorf("violations %v, want one: 5 inside, limit 3", v)
	}
	var none conformance.Occupancy // the zero value has no limit
	none.Enter(100)()
	if none.Peak() != 100 || len(none.Violations()) != 0 {
		t.Errorf("zero value: peak %d, violations %v; want 100 and none", none.Peak(), none.Violations())
	}
}

func TestOccupancyEnterRefusesNonPositive(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Enter(0) did not panic")
		}
	}()
	new(conformance.Occupancy).Enter(0)
}

// TestOccupancyPeakIsExactUnderContention: goroutines all inside at once, entering together,
// leave a peak of exactly their number; goroutines that take turns leave a peak of one.
func TestOccupancyPeakIsExactUnderContention(t *testing.T) {
	const n = 64
	for range 20 {
		var o conformance.Occupancy
		var entered, wg sync.WaitGroup
		start := make(chan struct{})
		entered.Add(n)
		for range n {
			wg.Go(func() {
				<-start
				leave := o.Enter(1)
				entered.Done()
				entered.Wait() // every goroutine is inside
				leave()
			})
		}
		close(start)
		wg.Wait()
		if o.Peak() != n || o.Inside() != 0 {
			t.Fatalf("%d inside at once: peak %d, inside after %d; want %d and 0", n, o.Peak(), o.Inside(), n)
		}
	}
	o := conformance.NewOccupancy(1)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			mu.Lock()
			defer mu.Unlock()
			o.Enter(1)()
		})
	}
	wg.Wait()
	if o.Peak() != 1 || len(o.Violations()) != 0 {
		t.Errorf("taking turns: peak %d, violations %v; want 1 and none", o.Peak(), o.Violations())
	}
}

// Holders enter once they hold the lock and leave before they release it.
func ExampleOccupancy() {
	m, _ := primitives.NewMutex(memory.New(), "job")
	o := conformance.NewOccupancy(1)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			l, err := m.Acquire(context.Background())
			if err != nil {
				return
			}
			leave := o.Enter(1)
			// ... the work the lock protects ...
			leave()
			l.Release(context.Background())
		})
	}
	wg.Wait()
	fmt.Println("peak", o.Peak(), "violations", len(o.Violations()))
	// Output: peak 1 violations 0
}

package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/primitives"
)

// errStaleFence is what the fenced resource answers a write whose fence is lower than one it has
// accepted.
var errStaleFence = errors.New("refused: stale fence")

// reportStore stands in for the resource the lock protects (a database row, a bucket): it
// remembers the highest fence it has accepted and refuses writes that carry a lower one, so a
// holder that stalled past its lease cannot overwrite its successor's work.
type reportStore struct {
	mu      sync.Mutex
	highest uint64
	report  string
}

// Write stores report if fence is at least the highest fence accepted so far.
func (r *reportStore) Write(fence uint64, report string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fence < r.highest {
		return errStaleFence
	}
	r.highest, r.report = fence, report
	return nil
}

// Report returns the report last written.
func (r *reportStore) Report() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.report
}

func ExampleMutex_Do() {
	ctx := context.Background()
	mu, _ := primitives.NewMutex(memory.New(), "report:daily")
	reports := &reportStore{}

	var mondays uint64
	for _, day := range []string{"monday", "tuesday"} {
		err := mu.Do(ctx, func(ctx context.Context, lease primitives.Lease) error {
			// ctx is canceled, with a cause wrapping primitives.ErrLost, if the lease is lost meanwhile;
			// the fence protects the write that is already on its way when that happens.
			if day == "monday" {
				mondays = lease.Fence()
			}
			return reports.Write(lease.Fence(), day+"'s report")
		})
		fmt.Println(day, "done:", err)
	}

	// Monday's holder, stalled past its lease (a GC pause, a frozen VM), wakes and writes: its
	// fence is lower than Tuesday's, so the resource refuses it.
	fmt.Println("late monday:", reports.Write(mondays, "monday's report"))
	fmt.Println("kept:", reports.Report())
	// Output:
	// monday done: <nil>
	// tuesday done: <nil>
	// late monday: refused: stale fence
	// kept: tuesday's report
}

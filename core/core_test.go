package core_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

func TestManualClockMovesBothWays(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := core.NewManualClock(start)
	c.Advance(time.Minute)
	if got := c.Now(); !got.Equal(start.Add(time.Minute)) {
		t.Errorf("after Advance(1m): %v", got)
	}
	c.Advance(-2 * time.Minute)
	if got := c.Now(); !got.Equal(start.Add(-time.Minute)) {
		t.Errorf("after Advance(-2m): %v", got)
	}
	c.Set(start)
	if got := c.Now(); !got.Equal(start) {
		t.Errorf("after Set: %v", got)
	}
}

func TestSnapshotInUse(t *testing.T) {
	s := core.Snapshot{Leases: []core.LeaseInfo{{Permits: 2}, {Permits: 3}}}
	if s.InUse() != 5 {
		t.Errorf("InUse = %d, want 5", s.InUse())
	}
}

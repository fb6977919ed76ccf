package rediscore

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"
)

func newTestChannel() *channel {
	return &channel{name: "c", key: "k", keep: keepGrants, waiters: map[string][]*lineWaiter{}, floors: map[string]floorAt{},
		inflight: map[string]int{}, keptBy: map[string]int{}}
}

// TestFloorsCostO1Amortized: a try or a release by a holder not enrolled records its floor. A
// busy key sees a new holder at every Acquire, thousands within keepGrants; recording a floor
// read every floor of the last keepGrants, so each call on such a key cost a pass over
// thousands of entries (2 µs and more a call, 100 µs at a few thousand handoffs a second). Now
// the floors are swept when they have doubled since the last sweep, and are never more than
// twice the live ones at the last sweep.
func TestFloorsCostO1Amortized(t *testing.T) {
	c := newTestChannel()
	const n = 10000
	for i := range n {
		c.setFloor(fmt.Sprint("holder-", i), uint64(i))
	}
	if len(c.floors) != n {
		t.Fatalf("%d floors kept, want all %d (none is older than keepGrants)", len(c.floors), n)
	}
	// log2(10000/64) ≈ 7.3: one sweep per doubling.
	if c.scans > 10 {
		t.Fatalf("%d passes over the floors for %d floors recorded, want one per doubling (at most 10)", c.scans, n)
	}
	// Floors older than keepGrants go at the next sweep, and the floors stay within twice the
	// live ones.
	for h := range c.floors {
		c.floors[h] = floorAt{c.floors[h].fence, time.Now().Add(-2 * keepGrants)}
	}
	for i := range 3 * n {
		c.setFloor(fmt.Sprint("new-", i), uint64(i))
		if live := i + 1; len(c.floors) > max(2*live, 64) && len(c.floors) > c.sweepAt {
			t.Fatalf("after %d live floors, %d kept (sweep at %d)", live, len(c.floors), c.sweepAt)
		}
	}
	for h := range c.floors {
		if len(h) > 7 && h[:7] == "holder-" {
			t.Fatalf("floor %q, older than keepGrants, still kept after %d sweeps", h, c.scans)
		}
	}
}

// TestForgetLooksUpHoldersWithNoKeptGrant: a release reply's grants to other Stores' waiters
// are kept here for keepGrants (their holders may be this Store's, about to enroll), thousands
// on a busy key; forgetting the grants of a holder with none (every try and release of a holder
// not enrolled does) no longer reads them all. A holder's kept grants are still all found, and
// the count of each holder's grants follows what is kept.
func TestForgetLooksUpHoldersWithNoKeptGrant(t *testing.T) {
	c := newTestChannel()
	now := time.Now()
	for i := range 5000 {
		c.remember(recentGrant{grant: grant{holder: fmt.Sprint("other-", i%2500), fence: uint64(i + 1)}, at: now})
	}
	for i := range 5000 {
		c.forget(fmt.Sprint("mine-", i), math.MaxUint64, nil)
		c.setFloor(fmt.Sprint("mine-", i), 1)
	}
	if c.scans > 10 {
		t.Fatalf("%d passes over the kept grants or floors for 5000 holders with none kept, want one per doubling of the floors", c.scans)
	}
	// other-7 has fences 8 and 2508.
	var took []uint64
	c.forget("other-7", 100, func(f uint64) { took = append(took, f) })
	if !slices.Equal(took, []uint64{8}) {
		t.Fatalf("forget(other-7, up to 100) took %v, want [8]", took)
	}
	took = nil
	c.forget("other-7", math.MaxUint64, func(f uint64) { took = append(took, f) })
	if !slices.Equal(took, []uint64{2508}) {
		t.Fatalf("forget(other-7) took %v, want [2508]", took)
	}
	// Grants older than keepGrants go as new ones come; the counts follow.
	c.remember(recentGrant{grant: grant{holder: "late", fence: 1}, at: now.Add(keepGrants + time.Millisecond)})
	count := map[string]int{}
	for _, r := range c.recent {
		count[r.holder]++
	}
	if len(c.recent) != 1 || !maps.Equal(count, c.keptBy) {
		t.Fatalf("after the old grants lapsed: %d kept, counts %v, want 1 and %v", len(c.recent), c.keptBy, count)
	}
}

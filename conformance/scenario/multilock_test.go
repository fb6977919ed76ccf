package scenario_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/primitives"
)

// The MultiLock scenarios on the memory store, as a driver's author runs them on theirs: both
// Redis drivers (backend/internal/rediscore), PostgreSQL and Redlock run them too.

// overlapping are the key sets of MultiLocksNeverDeadlock: each pair shares a key with two others,
// named in both orders.
var overlapping = [][]string{{"a", "b"}, {"b", "a"}, {"c", "b"}, {"a", "c"}}

func TestMultiLocksOnMemoryNeverDeadlock(t *testing.T) {
	s := memory.New()
	var mls []*primitives.MultiLock
	for _, keys := range overlapping {
		mls = append(mls, scenario.MustMultiLock(t, s, keys, primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(scenario.DeadlockBound)))
	}
	scenario.MultiLocksNeverDeadlock(t, mls, 8)
}

func TestMultiLeaseOnMemoryExcludesMutexes(t *testing.T) {
	s := memory.New()
	mutex := func(k string) *primitives.Mutex { return scenario.MustMutex(t, s, k) }
	scenario.MultiLeaseExcludesMutexes(t, scenario.MustMultiLock(t, s, []string{"c", "a", "b"}, primitives.WithTTL(time.Minute)), mutex)
}

func TestFailedMultiLockOnMemoryHoldsNothing(t *testing.T) {
	s := memory.New()
	scenario.FailedMultiLockHoldsNothing(t, func(opts ...primitives.Option) *primitives.MultiLock {
		return scenario.MustMultiLock(t, s, []string{"b", "c", "a"}, append([]primitives.Option{primitives.WithTTL(time.Minute)}, opts...)...)
	}, func(k string) *primitives.Mutex { return scenario.MustMutex(t, s, k) })
}

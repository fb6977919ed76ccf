package redlock_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// MultiLock over Redlock: of memory nodes and of real redis-servers. A MultiLock takes its keys
// one by one, each as a Mutex takes its quorum, so it needs nothing of Redlock beyond what a
// Mutex does; Redlock keeps no line, so its waiters retry at their retry interval. The scenarios
// are those of conformance/scenario, as on every store: each MultiLock with a Redlock Store of
// its own, and one more for the Mutexes that contend with them.

// multiLockScenarios runs the MultiLock scenarios with mk making the Redlock Stores.
func multiLockScenarios(t *testing.T, mk func() core.Store) {
	ttl, retry := primitives.WithTTL(time.Minute), primitives.WithRetryInterval(time.Millisecond)
	other := mk()
	mutex := func(k string) *primitives.Mutex { return scenario.MustMutex(t, other, k, ttl) }
	t.Run("NeverDeadlock", func(t *testing.T) {
		var mls []*primitives.MultiLock
		for _, keys := range [][]string{{"a", "b"}, {"b", "a"}, {"c", "b"}, {"a", "c"}} {
			mls = append(mls, scenario.MustMultiLock(t, mk(), keys, ttl, retry, primitives.WithAcquireTimeout(scenario.DeadlockBound)))
		}
		scenario.MultiLocksNeverDeadlock(t, mls, 8)
	})
	// Keys out of sorted order: the scenario checks that Leases keep the order given.
	t.Run("ExcludesMutexes", func(t *testing.T) {
		scenario.MultiLeaseExcludesMutexes(t, scenario.MustMultiLock(t, mk(), []string{"c", "a", "b"}, ttl), mutex)
	})
	t.Run("FailedHoldsNothing", func(t *testing.T) {
		scenario.FailedMultiLockHoldsNothing(t, func(opts ...primitives.Option) *primitives.MultiLock {
			return scenario.MustMultiLock(t, mk(), []string{"b", "c", "a"}, append([]primitives.Option{ttl, retry}, opts...)...)
		}, mutex)
	})
}

func TestMultiLockOverRedlock(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	multiLockScenarios(t, func() core.Store { return mustNew(t, ss) })
}

func TestMultiLockOverRedlockRedisServers(t *testing.T) {
	t.Parallel() // servers of its own: runs beside the other real-server tests
	h := startRedisHarness(t)
	multiLockScenarios(t, func() core.Store { return h.NewStore(t) })
}

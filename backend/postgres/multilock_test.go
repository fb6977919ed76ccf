package postgres_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// The MultiLock scenarios of conformance/scenario on PostgreSQL: each MultiLock with a Store (and
// a pool) of its own, and one more for the Mutexes that contend with them, over keys of the
// test's own. A MultiLock takes its keys one by one, each as a Mutex, with no new SQL.

func TestMultiLockOnPostgres(t *testing.T) {
	testenv.SkipShort(t, "seconds of MultiLock scenarios, which send no SQL of their own: the Mutex tests and conformance/scenario's over the memory store cover them")
	t.Parallel()
	url, key := serverURL(t), uniqueKey(t)
	a, b, c := key+"a", key+"b", key+"c"
	ttl := primitives.WithTTL(time.Minute)
	other := newStore(t, url)
	mutex := func(k string) *primitives.Mutex { return scenario.MustMutex(t, other, k, ttl) }
	t.Run("NeverDeadlock", func(t *testing.T) {
		var mls []*primitives.MultiLock
		for _, keys := range [][]string{{a, b}, {b, a}, {c, b}, {a, c}} {
			mls = append(mls, scenario.MustMultiLock(t, newStore(t, url), keys, ttl, primitives.WithAcquireTimeout(scenario.DeadlockBound)))
		}
		scenario.MultiLocksNeverDeadlock(t, mls, 8)
	})
	// Keys out of sorted order: the scenario checks that Leases keep the order given.
	t.Run("ExcludesMutexes", func(t *testing.T) {
		scenario.MultiLeaseExcludesMutexes(t, scenario.MustMultiLock(t, newStore(t, url), []string{c, a, b}, ttl), mutex)
	})
	t.Run("FailedHoldsNothing", func(t *testing.T) {
		scenario.FailedMultiLockHoldsNothing(t, func(opts ...primitives.Option) *primitives.MultiLock {
			return scenario.MustMultiLock(t, newStore(t, url), []string{b, c, a}, append([]primitives.Option{ttl}, opts...)...)
		}, mutex)
	})
}

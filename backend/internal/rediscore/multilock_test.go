package rediscore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/primitives"
)

// MultiLock on a real redis-server through both drivers (see eachDriver), and on a Cluster with
// its keys on different nodes (multiLockOnCluster, run by TestOnCluster): the scenarios of
// conformance/scenario, each MultiLock and Mutex with a Store of its own. A MultiLock takes its
// keys one by one, each as a Mutex, so it needs nothing of the Redis core beyond what a Mutex
// does, and no two of its keys need share a slot.

// multiLockScenarios runs the MultiLock scenarios over the keys a, b and c, with mk making the
// Stores: one for each MultiLock, and one for the Mutexes that contend with them.
func multiLockScenarios(t *testing.T, mk func() redisharness.Store, a, b, c string) {
	ttl := primitives.WithTTL(time.Minute)
	other := mk()
	mutex := func(k string) *primitives.Mutex { return scenario.MustMutex(t, other, k, ttl) }
	t.Run("NeverDeadlock", func(t *testing.T) {
		var mls []*primitives.MultiLock
		for _, keys := range [][]string{{a, b}, {b, a}, {c, b}, {a, c}} {
			mls = append(mls, scenario.MustMultiLock(t, mk(), keys, ttl, primitives.WithAcquireTimeout(scenario.DeadlockBound)))
		}
		scenario.MultiLocksNeverDeadlock(t, mls, 8)
	})
	// Keys out of sorted order: the scenario checks that Leases keep the order given.
	t.Run("ExcludesMutexes", func(t *testing.T) {
		scenario.MultiLeaseExcludesMutexes(t, scenario.MustMultiLock(t, mk(), []string{c, a, b}, ttl), mutex)
	})
	t.Run("FailedHoldsNothing", func(t *testing.T) {
		scenario.FailedMultiLockHoldsNothing(t, func(opts ...primitives.Option) *primitives.MultiLock {
			return scenario.MustMultiLock(t, mk(), []string{b, c, a}, append([]primitives.Option{ttl}, opts...)...)
		}, mutex)
	})
}

func TestMultiLockOnRedis(t *testing.T) {
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		multiLockScenarios(t, mk, "a", "b", "c")
	})
}

// multiLockOnCluster: the MultiLock scenarios on a Cluster, through both drivers, over three keys
// whose slots three different masters serve: a MultiLock's keys need not share a slot or a node.
func multiLockOnCluster(t *testing.T, addrs []string) {
	for _, name := range []string{"goredis", "valkey"} {
		t.Run(name, func(t *testing.T) {
			keys := keysOnDifferentNodes(t, addrs, "multi:"+name+":", 3)
			multiLockScenarios(t, func() redisharness.Store { return redisharness.Drivers[name](t, addrs...) }, keys[0], keys[1], keys[2])
		})
	}
}

// keysOnDifferentNodes returns n keys starting with prefix whose Redis keys the Cluster of addrs
// serves from n different masters.
func keysOnDifferentNodes(t *testing.T, addrs []string, prefix string, n int) []string {
	t.Helper()
	var keys, owners []string
	taken := map[string]bool{}
	for i := 0; len(keys) < n; i++ {
		if i == 1000 {
			t.Fatalf("no %d keys %q… on different masters of %v in 1000 tries: found %q", n, prefix, addrs, keys)
		}
		key := fmt.Sprint(prefix, i)
		owner := ownerOf(t, addrs, rediscore.Keys(key)[0])
		if !taken[owner] {
			taken[owner] = true
			keys, owners = append(keys, key), append(owners, owner)
		}
	}
	t.Logf("keys %q on the masters %q", keys, owners)
	return keys
}

// ownerOf returns the address of the master of addrs that serves the slot of the Redis key rkey:
// the one that does not redirect a command on it.
func ownerOf(t *testing.T, addrs []string, rkey string) string {
	t.Helper()
	for _, a := range addrs {
		reply, err := redistest.Do(a, "EXISTS", rkey)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(reply, "-") {
			return a
		}
	}
	t.Fatalf("no node of %v serves %q", addrs, rkey)
	return ""
}

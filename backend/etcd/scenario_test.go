package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// The RWMutex, Election and MultiLock scenarios of conformance/scenario on etcd, each primitive
// with a Store (and a client) of its own, as separate processes have. Every test uses a key of
// its own, named after it, on the package's one server.

func TestRWMutexOnEtcd(t *testing.T) {
	testenv.SkipShort(t, "the RWMutex scenarios run for seconds")
	t.Parallel()
	// A server of its own: the stream of readers behind a writer (WriterNotStarved) is the
	// heaviest load of the package, and on the shared server it competed with the conformance
	// suite's for the same etcd.
	srv := etcdtest.Start(t)
	newStore := func(t testing.TB) *etcd.Store { return storeOn(t, srv) }
	key := uniqueKey(t)
	mk := func(opts ...primitives.Option) *primitives.RWMutex {
		return scenario.MustRWMutex(t, newStore(t), key, opts...)
	}
	t.Run("ExcludesAndShares", func(t *testing.T) {
		var rws []*primitives.RWMutex
		for range 3 {
			rws = append(rws, mk(primitives.WithRetryInterval(time.Millisecond), primitives.WithAcquireTimeout(time.Minute)))
		}
		if peak := scenario.RWStress(t, rws, 8, 20, time.Millisecond); peak < 2 {
			t.Errorf("at most %d reader at once: readers did not share the key", peak)
		}
	})
	t.Run("WriterNotStarved", func(t *testing.T) {
		rd := mk()
		scenario.WriterNotStarved(t, rd, mk(primitives.WithAcquireTimeout(5*time.Second)), scenario.WriterInLine(rd))
	})
	t.Run("WaitingWriterHoldsBackTries", func(t *testing.T) {
		line := scenario.LineLength(newStore(t), key)
		scenario.WaitingWriterHoldsBackTries(t, func() *primitives.RWMutex { return mk() },
			func(context.Context) bool { return line() == 1 })
	})
	t.Run("LineIsFIFO", func(t *testing.T) {
		scenario.RWLineIsFIFO(t, func(v string) *primitives.RWMutex {
			return mk(primitives.WithValue(v), primitives.WithRetryInterval(time.Hour))
		})
	})
	t.Run("Inspect", func(t *testing.T) {
		scenario.RWInspect(t, func(v string) *primitives.RWMutex { return mk(primitives.WithValue(v)) }, true)
	})
}

func TestElectionOnEtcd(t *testing.T) {
	testenv.SkipShort(t, "waits out a leader's 2s TTL")
	t.Parallel()
	key := uniqueKey(t)
	mk := func(k string, opts ...primitives.Option) *primitives.Election {
		return scenario.MustElection(t, newStore(t), k, opts...)
	}
	t.Run("OneLeaderAtATime", func(t *testing.T) {
		var els []*primitives.Election
		for range 4 {
			els = append(els, mk(key, primitives.WithRetryInterval(time.Millisecond)))
		}
		scenario.OneLeaderAtATime(t, els, 15)
	})
	t.Run("ResignHandsOverAtOnce", func(t *testing.T) {
		line := scenario.LineLength(newStore(t), key)
		a := mk(key, primitives.WithTTL(time.Minute))
		b := mk(key, primitives.WithTTL(time.Minute), primitives.WithRetryInterval(time.Hour))
		scenario.ResignHandsOver(t, a, b, func() bool { return line() == 1 })
	})
	t.Run("ObserveSeesEveryChange", func(t *testing.T) {
		els := []*primitives.Election{mk(key), mk(key)}
		// An hour's retry interval: only the Store's Watch explains a prompt update.
		obs := mk(key, primitives.WithRetryInterval(time.Hour))
		scenario.ObserveSeesEveryChange(t, els, obs)
		scenario.ObserveSeesHandovers(t, els, obs, scenario.LineLength(newStore(t), key))
	})
	t.Run("ObserveSeesDeadLeaderGone", func(t *testing.T) {
		el := mk(key+"dead", primitives.WithTTL(2*time.Second), primitives.WithoutRefresh())
		scenario.ObserveSeesDeadLeaderGone(t, el, mk(key+"dead", primitives.WithRetryInterval(time.Hour)))
	})
	t.Run("LeaderCarriesTheValue", func(t *testing.T) {
		scenario.LeaderCarriesTheValue(t, mk(key+"value"), mk(key+"value"))
	})
	t.Run("ObserveEndsWithCtx", func(t *testing.T) {
		scenario.ObserveEndsWithCtx(t, mk(key))
	})
}

// A MultiLock takes its keys one by one, each as a Mutex: nothing of its own in the Store.
func TestMultiLockOnEtcd(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	a, b, c := key+"a", key+"b", key+"c"
	ttl := primitives.WithTTL(time.Minute)
	other := newStore(t)
	mutex := func(k string) *primitives.Mutex { return scenario.MustMutex(t, other, k, ttl) }
	t.Run("NeverDeadlock", func(t *testing.T) {
		var mls []*primitives.MultiLock
		for _, keys := range [][]string{{a, b}, {b, a}, {c, b}, {a, c}} {
			mls = append(mls, scenario.MustMultiLock(t, newStore(t), keys, ttl, primitives.WithAcquireTimeout(scenario.DeadlockBound)))
		}
		scenario.MultiLocksNeverDeadlock(t, mls, 8)
	})
	t.Run("ExcludesMutexes", func(t *testing.T) {
		scenario.MultiLeaseExcludesMutexes(t, scenario.MustMultiLock(t, newStore(t), []string{c, a, b}, ttl), mutex)
	})
	t.Run("FailedHoldsNothing", func(t *testing.T) {
		scenario.FailedMultiLockHoldsNothing(t, func(opts ...primitives.Option) *primitives.MultiLock {
			return scenario.MustMultiLock(t, newStore(t), []string{b, c, a}, append([]primitives.Option{ttl}, opts...)...)
		}, mutex)
	})
}

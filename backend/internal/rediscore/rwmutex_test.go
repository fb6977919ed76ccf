package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/primitives"
)

// RWMutex on a real redis-server through both drivers (see eachDriver), each RWMutex with a Store
// of its own, as separate processes have: the scenarios of conformance/scenario. Those that read
// values or waiters from Inspect need the Redis core's values and line in Inspect.

func TestRWMutexOnRedisExcludesAndShares(t *testing.T) {
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		var rws []*primitives.RWMutex
		for range 3 {
			rws = append(rws, scenario.MustRWMutex(t, mk(), "rw", primitives.WithRetryInterval(time.Millisecond), primitives.WithAcquireTimeout(time.Minute)))
		}
		if peak := scenario.RWStress(t, rws, 8, 20, time.Millisecond); peak < 2 {
			t.Errorf("at most %d reader at once: readers did not share the key", peak)
		}
	})
}

func TestRWMutexOnRedisWriterNotStarved(t *testing.T) {
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		rd := scenario.MustRWMutex(t, mk(), "rw")
		wr := scenario.MustRWMutex(t, mk(), "rw", primitives.WithAcquireTimeout(5*time.Second))
		scenario.WriterNotStarved(t, rd, wr, scenario.WriterInLine(rd))
	})
}

func TestRWMutexOnRedisWaitingWriterHoldsBackTries(t *testing.T) {
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		scenario.WaitingWriterHoldsBackTries(t, func() *primitives.RWMutex { return scenario.MustRWMutex(t, mk(), "rw") },
			func(context.Context) bool { return lineLen(t, addr, "rw") == 1 })
	})
}

func TestRWMutexOnRedisLineIsFIFO(t *testing.T) {
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		scenario.RWLineIsFIFO(t, func(v string) *primitives.RWMutex {
			return scenario.MustRWMutex(t, mk(), "rw", primitives.WithValue(v), primitives.WithRetryInterval(time.Hour))
		})
	})
}

func TestRWMutexOnRedisInspect(t *testing.T) {
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		scenario.RWInspect(t, func(v string) *primitives.RWMutex {
			return scenario.MustRWMutex(t, mk(), "rw", primitives.WithValue(v))
		}, true)
	})
}

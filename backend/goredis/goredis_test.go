package goredis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

func TestMain(m *testing.M) {
	// The parallel tests mostly wait on servers and on leaves' budgets, not the CPU.
	testenv.ParallelForWaits()
	goleak.VerifyTestMain(m)
}

// The three conformance runs each start a backend of their own, and run beside each other: a
// cluster takes seconds to form.
func TestConformanceMiniredis(t *testing.T) {
	t.Parallel()
	conformance.Run(t, redisharness.Miniredis(t, redisharness.GoRedis), conformance.WithSoak(testenv.Soak()))
}

func TestConformanceRedisServer(t *testing.T) {
	t.Parallel()
	conformance.Run(t, redisharness.Server(t, redisharness.GoRedis), conformance.WithSoak(testenv.Soak()))
}

func TestConformanceRedisCluster(t *testing.T) {
	testenv.SkipShort(t, "starts a Redis Cluster: the suite on a Cluster runs without -short (TestConformanceRedisServer runs it on one server)")
	t.Parallel()
	conformance.Run(t, redisharness.Cluster(t, redisharness.GoRedis), conformance.WithSoak(testenv.Soak()))
}

func TestSmokeContext(t *testing.T) {
	_ = context.Background
}

// TestFaultMiniredisTimeJumps: the server's clock jumps forward past a lease's TTL (the lease
// expires; the next grant gets a higher fence) and then back (a lease lasts longer; fences still
// only go up), on miniredis, whose clock the test sets.
func TestFaultMiniredisTimeJumps(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(t0)
	s := redisharness.GoRedis(t, m.Addr())
	ctx := context.Background()
	req := func(holder string) core.AcquireRequest {
		return core.AcquireRequest{Key: "jump", Holder: holder, Permits: 1, Limit: 1, TTL: 10 * time.Second}
	}
	grant := func(holder string, want bool) uint64 {
		t.Helper()
		res, err := s.Acquire(ctx, req(holder))
		if err != nil || res.Granted != want {
			t.Fatalf("Acquire(%s) = %+v, %v; want granted %v", holder, res, err, want)
		}
		return res.Fence
	}
	fa := grant("a", true)
	grant("b", false)
	m.SetTime(t0.Add(20 * time.Second)) // forward past a's TTL
	fb := grant("b", true)
	if fb <= fa {
		t.Fatalf("fence %d after a forward jump, not above %d", fb, fa)
	}
	if _, err := s.Extend(ctx, core.ExtendRequest{Key: "jump", Holder: "a", TTL: 10 * time.Second}); !errors.Is(err, core.ErrLost) {
		t.Errorf("extending the lease the jump expired: %v, want ErrLost", err)
	}
	m.SetTime(t0) // back by 20 s: b's lease now has 30 s left
	grant("c", false)
	if held, err := s.Release(ctx, core.ReleaseRequest{Key: "jump", Holder: "b"}); err != nil || !held {
		t.Fatalf("Release(b) = %v, %v", held, err)
	}
	if fc := grant("c", true); fc <= fb {
		t.Fatalf("fence %d after the clock went back, not above %d", fc, fb)
	}
}

package valkey_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/testenv"
)

// valkey-go's cluster client leaves a topology refresh asleep for a few seconds after Close
// (after a call cut short, the delayed refresh it schedules too); it is the library's, not ours.
func TestMain(m *testing.M) {
	// The parallel tests mostly wait on servers, not the CPU. The tests that set cancelGrace or
	// check for leaks run alone, before them.
	testenv.ParallelForWaits()
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*call).DelayDo.func1"))
}

// The three conformance runs each start a backend of their own, and run beside each other: a
// cluster takes seconds to form.
func TestConformanceMiniredis(t *testing.T) {
	t.Parallel()
	conformance.Run(t, redisharness.Miniredis(t, redisharness.Valkey), conformance.WithSoak(testenv.Soak()))
}

func TestConformanceRedisServer(t *testing.T) {
	t.Parallel()
	conformance.Run(t, redisharness.Server(t, redisharness.Valkey), conformance.WithSoak(testenv.Soak()))
}

func TestConformanceRedisCluster(t *testing.T) {
	testenv.SkipShort(t, "starts a Redis Cluster: the suite on a Cluster runs without -short (TestConformanceRedisServer runs it on one server)")
	t.Parallel()
	conformance.Run(t, redisharness.Cluster(t, redisharness.Valkey), conformance.WithSoak(testenv.Soak()))
}

package rediscore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testenv"
)

func TestMain(m *testing.M) {
	// Most tests wait on servers and timers: eight at once keep `go test ./...` within its
	// minutes; four under -race, whose slower goroutines stretch the timings the tests bound.
	// Under LEASEHOLD_SOAK=1 (CI, with the race detector) the default two, for a loaded
	// machine's sake.
	if !testenv.Soak() {
		n := 8
		if testenv.Race {
			n = 4
		}
		testenv.ParallelWaiters(n)
	}
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"))
}

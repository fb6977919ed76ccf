package rediscore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testenv"
)

func TestMain(m *testing.M) {
	// Most tests wait on servers and timers: running several at once keeps `go test ./...`
	// within its minutes.
	testenv.ParallelForWaits()
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"))
}

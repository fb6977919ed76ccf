package conformance_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPrefixStore runs the suite over the wrapper Store of Example_wrapperStore.
func TestPrefixStore(t *testing.T) {
	conformance.Run(t, newPrefixHarness(), conformance.WithSoak(testenv.Soak()))
}

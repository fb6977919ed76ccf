package postgres_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain stops the shared server after the tests and checks that no goroutine outlives them:
// every Store's listener, renewer and leaves end with its Close.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

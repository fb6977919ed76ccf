//go:build !unix

package etcdtest

import (
	"syscall"
	"testing"
)

// pauseSignals skips the test: a process cannot be paused by a signal here (Windows has no
// SIGSTOP).
func pauseSignals(t testing.TB) (pause, resume syscall.Signal) {
	t.Helper()
	t.Skip("etcdtest: a server cannot be paused here: no SIGSTOP")
	return 0, 0
}

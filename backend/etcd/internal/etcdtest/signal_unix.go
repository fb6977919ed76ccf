//go:build unix

package etcdtest

import (
	"syscall"
	"testing"
)

// pauseSignals returns the signals that pause and continue a process.
func pauseSignals(testing.TB) (pause, resume syscall.Signal) {
	return syscall.SIGSTOP, syscall.SIGCONT
}

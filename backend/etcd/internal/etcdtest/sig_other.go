//go:build !unix

package etcdtest

import "syscall"

// This system has no signals that pause and resume a process: Process.Signal refuses these, and
// Pause and Resume fail the test, saying so.
const (
	sigStop syscall.Signal = -1
	sigCont syscall.Signal = -2
)

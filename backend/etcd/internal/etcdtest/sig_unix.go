//go:build unix

package etcdtest

import "syscall"

// The signals that pause and resume a server.
const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)

//go:build !linux

package etcdtest

import "syscall"

// sysProcAttr has nothing to add where there is no Pdeathsig: the server exits when its
// standard input, from the test binary, reaches end of file.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// stopped cannot tell whether the process has stopped yet: it says so at once.
func stopped(pid int) bool { return true }

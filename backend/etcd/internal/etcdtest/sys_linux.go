package etcdtest

import "syscall"

// sysProcAttr makes the kernel kill the server when the test binary dies, even while the server
// is stopped (SIGSTOP), which its watch of standard input could not see.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

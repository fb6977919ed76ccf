package etcdtest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// sysProcAttr makes the kernel kill the server when the test binary dies, even while the server
// is stopped (SIGSTOP), which its watch of standard input could not see.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// stopped reports whether every thread of process pid is stopped. SIGSTOP stops a process only
// once one of its threads, picked by the kernel, runs and stops the others: on a loaded machine
// the rest go on serving meanwhile, for as long as that thread waits for a CPU.
func stopped(pid int) bool {
	stats, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "stat"))
	if len(stats) == 0 {
		return false
	}
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		// The state follows the command name, in parentheses that may hold any byte.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

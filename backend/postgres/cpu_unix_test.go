//go:build unix

package postgres_test

import (
	"syscall"
	"time"
)

// clientCPU returns the CPU time this process has used, user and system.
func clientCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

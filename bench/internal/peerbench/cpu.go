//go:build unix

package peerbench

import (
	"syscall"
	"time"
)

// processCPU returns the CPU, user and system, this process has used since it started.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

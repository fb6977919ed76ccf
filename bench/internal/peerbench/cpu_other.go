//go:build !unix

package peerbench

import (
	"errors"
	"time"
)

// processCPU is unix-only: getrusage(RUSAGE_SELF).
func processCPU() (time.Duration, error) {
	return 0, errors.New("process CPU: getrusage is unix-only")
}

// machineCPU is unix-only: /proc/stat.
func machineCPU() (time.Duration, bool) { return 0, false }

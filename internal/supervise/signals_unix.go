//go:build unix

package supervise

import (
	"os"
	"syscall"
)

// Forwarded are the signals `leasehold run` passes on to the command with Signal, and which the
// supervisor outlives.
var Forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

//go:build unix && !linux

package cli

import (
	"os"
	"syscall"
)

// forwarded are the signals `leasehold run` passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

//go:build !unix

package cli

import (
	"os"
	"syscall"
)

// forwarded are the signals `leasehold run` passes on to the command: those this system
// delivers to a process (Ctrl-C or Ctrl-Break as os.Interrupt, the console closing or the
// system shutting down as SIGTERM).
var forwarded = []os.Signal{os.Interrupt, syscall.SIGTERM}

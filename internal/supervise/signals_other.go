//go:build !unix

package supervise

import (
	"os"
	"syscall"
)

// Forwarded are the signals `leasehold run` passes on to the command with Signal: those this
// system delivers to a process (Ctrl-C or Ctrl-Break as os.Interrupt, the console closing or the
// system shutting down as SIGTERM).
var Forwarded = []os.Signal{os.Interrupt, syscall.SIGTERM}

// Package supervise runs the command of `leasehold run` and `leasehold elect` so that it is gone
// before its lease can pass to anyone else: Start starts it, stopped on a schedule (Stop: SIGTERM,
// then SIGKILL before the lease's deadline) that Schedule moves after each refresh; Signal passes
// a signal on; Done and Wait report how it ended.
//
// On Linux the command runs in a process group of its own under a supervisor: this binary
// re-executed, which this package's init turns into the supervisor before main runs (the
// LEASEHOLD_RUN_SUPERVISOR variable), so a program that starts commands with Start must import
// this package from its main binary, as internal/cli does. The supervisor keeps the schedule on
// its own clock (a dead-man's switch), kills the group when the CLI dies, and, a child subreaper,
// kills what leaves the group too. On other systems the command is a plain child process that the
// CLI's own timers stop.
package supervise

import (
	"errors"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// Stop is when the command is stopped unless the lease is renewed first: SIGTERM at Term, SIGKILL
// at Kill, both before the lease's Deadline.
type Stop struct {
	Term, Kill, Deadline time.Time
}

// Stdio is where a started command reads and writes.
type Stdio struct {
	In       io.Reader
	Out, Err io.Writer
}

// statusFail is the exit status of a command whose end is unknown, and of a supervisor that
// failed.
const statusFail = 1

// exitStatus is the shell's view of how a command ended, as its Wait reported it: its own status,
// 128+N if signal N ended it, statusFail if it is unknown.
func exitStatus(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return statusFail
		}
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

//go:build !unix

package pgtest

import (
	"fmt"
	"os/exec"
	"runtime"
)

// credential is the user a server's processes would run as.
type credential struct{ Uid, Gid uint32 }

// sig is a signal the Server would send its processes.
type sig int

const (
	sigKill sig = iota
	sigStop
	sigCont
)

// unsupported says that servers do not run on this system: the package runs the server as
// another user when root, and pauses and kills its processes with signals, which only Unix has.
func unsupported() error {
	return fmt.Errorf("pgtest: PostgreSQL test servers run only on Unix, not %s", runtime.GOOS)
}

func unprivileged() (*credential, error) { return nil, unsupported() }

func commandAs(_ *credential, path string, args ...string) *exec.Cmd {
	return exec.Command(path, args...)
}

func chown(*credential, string) error { return unsupported() }

func (s *Server) signal(sig) []int { return nil }

func gone(int) bool { return true }

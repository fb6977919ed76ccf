//go:build unix

package goredis_test

import (
	"os"
	"syscall"
)

// pauseProcess stops p (SIGSTOP): it holds its connections and answers nothing until
// resumeProcess.
func pauseProcess(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// resumeProcess continues p after pauseProcess (SIGCONT).
func resumeProcess(p *os.Process) error { return p.Signal(syscall.SIGCONT) }

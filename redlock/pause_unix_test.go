//go:build unix

package redlock_test

import "syscall"

// pauseProcess stops the process pid (SIGSTOP): it holds its connections and answers nothing
// until resumeProcess.
func pauseProcess(pid int) error { return syscall.Kill(pid, syscall.SIGSTOP) }

// resumeProcess continues the process pid after pauseProcess (SIGCONT).
func resumeProcess(pid int) error { return syscall.Kill(pid, syscall.SIGCONT) }

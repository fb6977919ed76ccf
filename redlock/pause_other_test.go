//go:build !unix

package redlock_test

import "errors"

// pauseProcess would stop the process pid: this system has no SIGSTOP.
func pauseProcess(int) error { return errors.ErrUnsupported }

// resumeProcess would continue the process pid: this system has no SIGCONT.
func resumeProcess(int) error { return errors.ErrUnsupported }

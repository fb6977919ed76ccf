//go:build !unix

package goredis_test

import (
	"errors"
	"os"
)

// pauseProcess would stop p: this system has no SIGSTOP.
func pauseProcess(*os.Process) error { return errors.ErrUnsupported }

// resumeProcess would continue p: this system has no SIGCONT.
func resumeProcess(*os.Process) error { return errors.ErrUnsupported }

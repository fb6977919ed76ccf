//go:build !unix

package postgres_test

import "time"

// clientCPU returns 0: this system's CPU time is not read here.
func clientCPU() time.Duration { return 0 }

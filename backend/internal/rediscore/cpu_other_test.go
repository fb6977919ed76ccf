//go:build !unix

package rediscore_test

import "time"

// processCPU reports that this platform's CPU time is not read here.
func processCPU() (time.Duration, bool) { return 0, false }

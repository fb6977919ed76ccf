package valkey

import "time"

// SetCancelGrace sets cancelGrace to d and returns a func that restores it.
func SetCancelGrace(d time.Duration) (restore func()) {
	old := cancelGrace.Swap(int64(d))
	return func() { cancelGrace.Store(old) }
}

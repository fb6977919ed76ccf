package conformance

import "time"

// WithWakeTimeout sets how long the suite waits for a notification. The suite's own tests run it
// against broken stores, some of which never notify: each of their notification tests would
// otherwise wait out the whole wakeTimeout.
func WithWakeTimeout(d time.Duration) Option {
	return func(s *suite) { s.wake = d }
}

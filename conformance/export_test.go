package conformance

import "time"

// WithWakeTimeout sets how long the suite waits for a notification. The suite's own tests run it
// against broken stores, some of which never notify: each of their notification tests would
// otherwise wait out the whole wakeTimeout.
func WithWakeTimeout(d time.Duration) Option {
	return func(s *suite) { s.wake = d }
}

// WithCutShortRun sets how long the check of calls cut short runs its calls. The suite's own
// tests run it against twenty-one broken stores at once: a short run catches the ones it must.
func WithCutShortRun(d time.Duration) Option {
	return func(s *suite) { s.cutShortRun = d }
}

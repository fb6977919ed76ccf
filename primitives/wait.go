package primitives

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/core"
)

// acquisition is the state of one Acquire call: its tries, its enrollment for notifications,
// and its acquire timeout.
type acquisition struct {
	s        *Semaphore
	req      core.AcquireRequest
	attempts int // 0: unlimited
	tries    int
	begin    time.Time // when Acquire started: the acquire timeout counts from here

	enrolled bool // registration with the notifier (or the watch) was attempted
	// wakes is what wakes the caller between tries: its waiter, or without a notifier a watch of
	// the key; nil when there is neither.
	wakes      core.Wake
	timeout    *time.Timer // acquire timeout, started at the first wait
	retryTimer *time.Timer
}

// try makes one attempt. An error is final; a refusal is not.
func (a *acquisition) try(ctx context.Context) (core.AcquireResult, error) {
	a.tries++
	if a.s.gate != nil {
		blocked, after, err := a.s.gate(ctx)
		if err != nil {
			return core.AcquireResult{}, err
		}
		if blocked {
			return a.refused(core.AcquireResult{RetryAfter: after})
		}
	}
	a.req.Wait = a.willWait(ctx)
	res, err := a.s.store.Acquire(ctx, a.req)
	if err != nil {
		if a.s.cfg.holder == "" && !errors.Is(err, ErrLimitMismatch) {
			// The store may have granted the lease although the reply was lost (ctx ended, the
			// connection broke): don't leave it to expire. A caller-chosen holder id may name a
			// lease held elsewhere, so that one is left be. A limit mismatch changed nothing.
			a.abandon()
		}
		return res, err
	}
	if res.Granted {
		return res, nil
	}
	return a.refused(res)
}

// refused returns the refusal res, or an error wrapping ErrNotAcquired when it was the
// last attempt.
func (a *acquisition) refused(res core.AcquireResult) (core.AcquireResult, error) {
	if a.attempts > 0 && a.tries >= a.attempts {
		if a.attempts == 1 {
			return res, fmt.Errorf("%w: busy", ErrNotAcquired)
		}
		return res, fmt.Errorf("%w: %d attempts exhausted", ErrNotAcquired, a.attempts)
	}
	return res, nil
}

// willWait returns how long the caller would wait after the try about to be made, if refused:
// zero for a last attempt, else what is left of the acquire timeout and of ctx, never more than
// MaxDuration (the most a store is ever told).
func (a *acquisition) willWait(ctx context.Context) time.Duration {
	if a.attempts > 0 && a.tries >= a.attempts {
		return 0
	}
	d := MaxDuration
	if left, ok := a.timeoutLeft(); ok {
		d = min(d, left)
	}
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)) // time.Until saturates rather than overflow
	}
	return max(d, 0)
}

// timeoutLeft returns what is left of the acquire timeout, or false when there is none
// (WithAcquireTimeout above MaxDuration). It cannot overflow: the timeout is positive and
// the time elapsed is not negative.
func (a *acquisition) timeoutLeft() (time.Duration, bool) {
	if a.s.cfg.acquireTimeout > MaxDuration {
		return 0, false
	}
	return a.s.cfg.acquireTimeout - time.Since(a.begin), true
}

// wait returns when the next try is due: on a wake (a new waiter starts woken unless its store
// can tell that no release was missed since the refused try; not under WithAttempts, whose tries
// are paced by the retry interval), after retryAfter (capped by the retry interval unless
// notifications are reliable and attempts unlimited), or with an error when the acquire timeout
// passes or ctx ends.
func (a *acquisition) wait(ctx context.Context, retryAfter time.Duration) error {
	switch {
	case !a.enrolled && a.s.notifier != nil:
		a.enrolled = true
		nw, err := a.s.notifier.Register(ctx, a.req)
		switch {
		case err == nil:
			a.wakes = nw
		case ctx.Err() != nil:
			return ctx.Err()
		}
		// Without notifications the waiter still works, at the retry interval.
	case !a.enrolled && a.s.notifier == nil && a.s.watcher != nil && a.attempts == 0:
		// A store without a line (Redlock) that announces changes: the waiter watches the key
		// from its first refusal and wakes on a change (with a core.AcquireWatcher, only on one
		// that could serve it), so that a release is noticed at once rather than at the next
		// retry interval; the watch costs about one round trip to the store's servers. A
		// change between the refused try and the watch would go unseen, so try again at once.
		a.enrolled = true
		var w core.Wake
		var err error
		if aw, ok := a.s.store.(core.AcquireWatcher); ok {
			w, err = aw.WatchAcquire(ctx, a.req)
		} else {
			w, err = a.s.watcher.Watch(ctx, a.req.Key)
		}
		if err == nil {
			a.wakes = w
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	var timeout <-chan time.Time // nil, never ready, when there is no acquire timeout
	if left, ok := a.timeoutLeft(); ok {
		if a.timeout == nil { // started on the first wait, so an uncontended acquire makes no timer
			a.timeout = time.NewTimer(left)
		}
		timeout = a.timeout.C
	}
	// With reliable notifications and unlimited attempts a waiter sends nothing until a wake or
	// until the store said the leases in its way expire. Otherwise it also retries at the retry
	// interval: without reliable notifications a release may go unseen, and WithAttempts(n)
	// promises n tries spaced by at most the retry interval, not n waits for a release.
	d := a.s.cfg.retryInterval
	switch {
	case retryAfter <= 0:
	case a.attempts == 0 && a.reliable(), retryAfter < d:
		d = min(retryAfter, MaxDuration) // a store's RetryAfter is not ours to trust
	}
	if a.retryTimer == nil {
		a.retryTimer = time.NewTimer(d)
	} else {
		a.retryTimer.Reset(d)
	}
	var wake <-chan struct{}
	if a.attempts == 0 {
		// Under WithAttempts(n) the tries are paced by the retry interval alone: a wake (a
		// subscription confirmed, say) would spend an attempt at once. A grant from the line
		// waits for the next try, at most a retry interval away.
		if a.wakes != nil {
			wake = a.wakes.C()
		}
	}
	select {
	case <-wake:
		return nil
	case <-a.retryTimer.C:
		return nil
	case <-timeout:
		return fmt.Errorf("%w: acquire timeout %v exceeded", ErrNotAcquired, a.s.cfg.acquireTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reliable reports whether the waiter hears of every release (or change) that could serve it.
func (a *acquisition) reliable() bool {
	return a.wakes != nil && a.wakes.Reliable()
}

// close ends the enrollment (the store passes on a grant the caller did not take) and stops the
// timers.
func (a *acquisition) close() {
	if a.wakes != nil {
		a.wakes.Close()
	}
	if a.timeout != nil {
		a.timeout.Stop()
	}
	if a.retryTimer != nil {
		a.retryTimer.Stop()
	}
}

// abandon releases, in the background and bounded in time, a lease the store may have granted
// after the caller stopped waiting for the answer.
func (a *acquisition) abandon() {
	// Copies, so that a itself does not escape to the heap on the hot path.
	store, key, holder := a.s.store, a.req.Key, a.req.Holder
	timeout := min(a.s.cfg.ttl, 2*time.Second)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		store.Release(ctx, core.ReleaseRequest{Key: key, Holder: holder}) // the id is this call's own: any fence is its grant
	}()
}

package primitives

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/core"
)

// waiter is the state of one Acquire call: its tries, its enrollment for notifications, and its
// acquire timeout.
type waiter struct {
	s        *Semaphore
	req      core.AcquireRequest
	attempts int // 0: unlimited
	tries    int
	begin    time.Time // when Acquire started: the acquire timeout counts from here

	enrolled   bool        // registration with the notifier was attempted
	w          core.Waiter // nil when not registered
	timeout    *time.Timer // acquire timeout, started at the first wait
	retryTimer *time.Timer
}

// try makes one attempt. An error is final; a refusal is not.
func (w *waiter) try(ctx context.Context) (core.AcquireResult, error) {
	w.tries++
	w.req.Wait = w.willWait(ctx)
	res, err := w.s.store.Acquire(ctx, w.req)
	if err != nil {
		if !w.s.cfg.holderSet {
			// The store may have granted the lease although the reply was lost (ctx ended, the
			// connection broke): don't leave it to expire. A caller-chosen holder id may name a
			// lease held elsewhere, so that one is left be.
			w.abandon()
		}
		return res, err
	}
	if !res.Granted && w.attempts > 0 && w.tries >= w.attempts {
		if w.attempts == 1 {
			return res, fmt.Errorf("%w: busy", core.ErrNotAcquired)
		}
		return res, fmt.Errorf("%w: %d attempts exhausted", core.ErrNotAcquired, w.attempts)
	}
	return res, nil
}

// willWait returns how long the caller would wait after the try about to be made, if refused:
// zero for a last attempt, else what is left of the acquire timeout and of ctx, never more than
// core.MaxDuration (the most a store is ever told).
func (w *waiter) willWait(ctx context.Context) time.Duration {
	if w.attempts > 0 && w.tries >= w.attempts {
		return 0
	}
	d := core.MaxDuration
	if left, ok := w.timeoutLeft(); ok {
		d = min(d, left)
	}
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)) // time.Until saturates rather than overflow
	}
	return max(d, 0)
}

// timeoutLeft returns what is left of the acquire timeout, or false when there is none
// (WithAcquireTimeout above core.MaxDuration). It cannot overflow: the timeout is positive and
// the time elapsed is not negative.
func (w *waiter) timeoutLeft() (time.Duration, bool) {
	if w.s.cfg.acquireTimeout > core.MaxDuration {
		return 0, false
	}
	return w.s.cfg.acquireTimeout - time.Since(w.begin), true
}

// wait returns when the next try is due: on a wake (a new waiter starts woken unless its store
// can tell that no release was missed since the refused try; not under WithAttempts, whose tries
// are paced by the retry interval), after retryAfter (capped by the retry interval unless
// notifications are reliable and attempts unlimited), or with an error when the acquire timeout
// passes or ctx ends.
func (w *waiter) wait(ctx context.Context, retryAfter time.Duration) error {
	if !w.enrolled && w.s.notifier != nil {
		w.enrolled = true
		nw, err := w.s.notifier.Register(ctx, w.req)
		switch {
		case err == nil:
			w.w = nw
		case ctx.Err() != nil:
			return ctx.Err()
		}
		// Without notifications the waiter still works, at the retry interval.
	}
	var timeout <-chan time.Time // nil, never ready, when there is no acquire timeout
	if left, ok := w.timeoutLeft(); ok {
		if w.timeout == nil { // started on the first wait, so an uncontended acquire makes no timer
			w.timeout = time.NewTimer(left)
		}
		timeout = w.timeout.C
	}
	// With reliable notifications and unlimited attempts a waiter sends nothing until a wake or
	// until the store said the leases in its way expire. Otherwise it also retries at the retry
	// interval: without reliable notifications a release may go unseen, and WithAttempts(n)
	// promises n tries spaced by at most the retry interval, not n waits for a release.
	d := w.s.cfg.retryInterval
	switch {
	case retryAfter <= 0:
	case w.attempts == 0 && w.w != nil && w.w.Reliable(), retryAfter < d:
		d = min(retryAfter, core.MaxDuration) // a store's RetryAfter is not ours to trust
	}
	if w.retryTimer == nil {
		w.retryTimer = time.NewTimer(d)
	} else {
		w.retryTimer.Reset(d)
	}
	var wake <-chan struct{}
	if w.w != nil && w.attempts == 0 {
		// Under WithAttempts(n) the tries are paced by the retry interval alone: a wake (a
		// subscription confirmed, say) would spend an attempt at once. A grant from the line
		// waits for the next try, at most a retry interval away.
		wake = w.w.C()
	}
	select {
	case <-wake:
		return nil
	case <-w.retryTimer.C:
		return nil
	case <-timeout:
		return fmt.Errorf("%w: acquire timeout %v exceeded", core.ErrNotAcquired, w.s.cfg.acquireTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close ends the enrollment (the store passes on a grant the caller did not take) and stops the
// timers.
func (w *waiter) close() {
	if w.w != nil {
		w.w.Close()
	}
	if w.timeout != nil {
		w.timeout.Stop()
	}
	if w.retryTimer != nil {
		w.retryTimer.Stop()
	}
}

// abandon releases, in the background and bounded in time, a lease the store may have granted
// after the caller stopped waiting for the answer.
func (w *waiter) abandon() {
	// Copies, so that w itself does not escape to the heap on the hot path.
	store, key, holder := w.s.store, w.req.Key, w.req.Holder
	timeout := min(w.s.cfg.ttl, 2*time.Second)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		store.Release(ctx, core.ReleaseRequest{Key: key, Holder: holder}) // the id is this call's own: any fence is its grant
	}()
}

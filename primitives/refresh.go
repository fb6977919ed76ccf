package primitives

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/core"
)

// drift is the allowance for the difference between the local clock and the store's: 1% of
// the TTL for their rates, and 2ms for the store's millisecond resolution (Redis keeps expiries
// in whole server milliseconds).
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

var errDeadline = errors.New("deadline passed without a successful refresh")

// refreshError is why a lease was lost at its deadline after failed refreshes: how many failed
// in a row, and the last one's error, which it wraps (the one before, if the last was only cut
// off by the deadline).
type refreshError struct {
	n    int
	last error
}

func (e *refreshError) Error() string {
	if e.n == 1 {
		return "1 refresh failed: " + e.last.Error()
	}
	return fmt.Sprintf("%d refreshes failed, last: %v", e.n, e.last)
}

func (e *refreshError) Unwrap() error { return e.last }

// tick runs when the timer fires: it declares the lease lost at its deadline, or refreshes it.
// After a failed refresh it retries sooner, so that a passing fault costs no loss.
func (l *lease) tick() {
	l.mu.Lock()
	now := time.Now()
	if l.ended || l.released {
		l.mu.Unlock()
		return
	}
	if !now.Before(l.stopAtLocked()) {
		notify, release := l.loseAtStopLocked()
		l.mu.Unlock()
		if notify != nil {
			notify()
		}
		if release != nil {
			release()
		}
		return
	}
	if l.refreshing {
		// Lease.Extend reset the timer while a refresh waits for it; that refresh will set the
		// timer again when it is done.
		l.mu.Unlock()
		return
	}
	if l.stopped || now.Before(l.nextRefresh) {
		l.timer.Reset(l.nextWakeLocked(now))
		l.mu.Unlock()
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), l.stopAtLocked())
	l.cancel = cancel
	l.refreshing = true
	l.running.Add(1)
	extending := l.extendingLocked()
	l.mu.Unlock()

	var res core.ExtendResult
	var err error
	exclusive := false
	select {
	case extending <- struct{}{}:
		exclusive = true
		now = time.Now()
		res, err = l.p.store.Extend(ctx, l.req)
		if h := l.p.cfg.extended; h != nil {
			h(l.req)
		}
	case <-ctx.Done(): // Release, or the deadline, came while a Lease.Extend was in flight
		err = ctx.Err()
	}
	// Cut off by the deadline: what failed before says more (a dead server's connection
	// refused, say, rather than the deadline of the retry in flight).
	cut := err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && errors.Is(err, context.DeadlineExceeded)
	cancel()

	l.mu.Lock()
	l.cancel = nil
	l.refreshing = false
	var notify func()
	var failed, recovered error
	switch {
	case err == nil && res.Fence != l.p.fence:
		notify = l.loseLocked("refresh", fmt.Errorf("the holder now holds a newer grant (fence %d)", res.Fence))
	case err == nil:
		l.deadline = now.Add(l.p.cfg.ttl - drift(l.p.cfg.ttl))
		l.nextRefresh = now.Add(l.p.cfg.refreshInterval)
		if l.failures > 0 {
			recovered = &refreshError{n: l.failures, last: l.lastFailure}
			l.failures, l.lastFailure = 0, nil
		}
	case errors.Is(err, ErrLost), errors.Is(err, ErrClosed):
		notify = l.loseLocked("refresh", err)
	default:
		if !l.stopped { // not aborted by Release or StopRefresh
			l.failures++
			if !cut || l.lastFailure == nil {
				l.lastFailure = err
			}
			if l.failures == 1 {
				failed = fmt.Errorf("leasehold: refresh %s: %w", quoteKey(l.p.key), err)
			}
		}
		if exclusive {
			// Sent: it may have gone through, its reply lost, and the store then ends the lease
			// a TTL after it, sooner than the deadline a longer Lease.Extend set.
			l.capDeadlineLocked(now, l.p.cfg.ttl)
		}
		after := time.Now()
		l.nextRefresh = after.Add(max(min(l.p.cfg.refreshInterval, l.stopAtLocked().Sub(after)/2), time.Millisecond))
	}
	if !l.ended && !l.released {
		l.timer.Reset(l.nextWakeLocked(time.Now()))
	}
	l.mu.Unlock()
	if exclusive {
		<-extending // only now: the deadline set above is the latest call's
	}
	l.running.Done()
	switch {
	case failed != nil:
		l.event(EventRefreshFailed, failed)
	case recovered != nil && notify == nil:
		l.event(EventRefreshRecovered, fmt.Errorf("leasehold: refresh %s: recovered after %w", quoteKey(l.p.key), recovered))
	}
	if err == nil && notify == nil {
		l.event(EventRefreshed, nil)
	}
	if notify != nil {
		notify()
	}
}

func (l *lease) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	fail := func(err error) (time.Time, error) {
		return time.Time{}, fmt.Errorf("leasehold: extend %s: %w", quoteKey(l.p.key), err)
	}
	if err := checkTTL(ttl); err != nil {
		return fail(err)
	}
	l.mu.Lock()
	released, lost := l.released, l.lost
	extending := l.extendingLocked()
	l.mu.Unlock()
	switch {
	case lost != nil:
		return fail(lost)
	case released:
		return fail(fmt.Errorf("%w: the lease was released", ErrNotHeld))
	}
	select {
	case extending <- struct{}{}:
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	start := time.Now()
	req := core.ExtendRequest{Key: l.p.key, Holder: l.p.holder, TTL: ttl}
	res, err := l.p.store.Extend(ctx, req)
	if h := l.p.cfg.extended; h != nil {
		h(req)
	}
	if err == nil && res.Fence != l.p.fence {
		err = fmt.Errorf("%w: the holder now holds a newer grant (fence %d)", ErrLost, res.Fence)
	}
	// The reply is applied before extending is let go, so that a refresh sent after this
	// call cannot have its deadline overwritten by this one's.
	l.mu.Lock()
	var notify func()
	switch {
	case err != nil && (errors.Is(err, ErrLost) || errors.Is(err, ErrClosed)):
		notify = l.loseLocked("extend", err)
		if l.lost != nil {
			err = l.lost
		}
	case err != nil:
		// It may have gone through, its reply lost: the store then ends the lease ttl after it,
		// which is sooner than the deadline when ttl is shorter than the lease's. Refresh by then.
		if l.capDeadlineLocked(start, ttl) && !l.ended && !l.released {
			now := time.Now()
			if next := now.Add(max(min(l.p.cfg.refreshInterval, l.stopAtLocked().Sub(now)/2), time.Millisecond)); next.Before(l.nextRefresh) {
				l.nextRefresh = next
			}
			l.timer.Reset(l.nextWakeLocked(now))
		}
	case l.ended || l.released:
		err = fmt.Errorf("%w: the lease ended during the extend", ErrNotHeld)
	default:
		l.deadline = start.Add(ttl - drift(ttl))
		// A shorter ttl than the lease's may put its stop point before the refresh planned:
		// refresh by then, as tick plans the next refresh, so that it is not lost unrenewed.
		now := time.Now()
		if next := now.Add(max(min(l.p.cfg.refreshInterval, l.stopAtLocked().Sub(now)/2), time.Millisecond)); next.Before(l.nextRefresh) {
			l.nextRefresh = next
		}
		l.timer.Reset(l.nextWakeLocked(now))
	}
	deadline := l.deadline
	l.mu.Unlock()
	<-extending
	if notify != nil {
		notify()
	}
	if err != nil {
		return fail(err)
	}
	return deadline, nil
}

// capDeadlineLocked brings the lease's deadline forward to what an extend by ttl sent at start
// would give it, if that is sooner: the extend failed, but may have reached the store. It
// reports whether the deadline moved. l.mu must be held.
func (l *lease) capDeadlineLocked(start time.Time, ttl time.Duration) bool {
	d := start.Add(ttl - drift(ttl))
	if !d.Before(l.deadline) {
		return false
	}
	l.deadline = d
	return true
}

// loseAtStopLocked ends the lease as lost at its stop point, unrenewed, and returns what is left
// to do once l.mu is released: notify reports the loss; release, when a failed refresh may have
// reached the store, releases the lease there (bounded in time; Release waits for it). Either
// may be nil. l.mu must be held.
func (l *lease) loseAtStopLocked() (notify, release func()) {
	var cause error = errDeadline
	if l.failures > 0 {
		cause = &refreshError{n: l.failures, last: l.lastFailure}
	}
	// A refresh that failed here may have reached the store, which then holds the lease for up
	// to a TTL more. Not after StopRefresh: the lease is another's to keep (Adopt). Not under a
	// holder id shared with other leases (WithHolder, Adopt): an acquire by that id now gets
	// this lease again, fence and all, which the release would end.
	send := l.failures > 0 && !l.stopped && l.p.own
	notify = l.loseLocked("hold", cause)
	if notify == nil || !send {
		return notify, nil
	}
	l.running.Add(1) // Release waits for this release
	return notify, func() {
		defer l.running.Done()
		l.releaseLost()
	}
}

// releaseLost releases the lease, lost at its deadline after failed refreshes, best-effort and
// bounded in time: one of them may have reached the store (its reply lost, or late), which then
// keeps the lease for up to a TTL from it, and a holder whose Release never runs would leave the
// key held by nobody until then. The request names holder and fence, and only a lease whose
// holder id is its own sends it (see tick), so it cannot end a newer lease.
func (l *lease) releaseLost() {
	if l.p.fence == 0 { // zero matches any fence of the holder: never sent for a known lease
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(l.p.cfg.ttl, 2*time.Second))
	defer cancel()
	l.p.store.Release(ctx, core.ReleaseRequest{Key: l.p.key, Holder: l.p.holder, Fence: l.p.fence})
}

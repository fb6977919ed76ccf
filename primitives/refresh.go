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
	r, notify, release := l.planTickLocked(time.Now())
	l.mu.Unlock()
	if notify != nil {
		notify()
	}
	if release != nil {
		release()
	}
	if r != nil {
		l.refresh(r)
	}
}

// refreshCall is one refresh that tick started: its ctx (ending at the lease's stop point),
// the Extend's outcome, and whether it was sent.
type refreshCall struct {
	ctx       context.Context
	cancel    context.CancelFunc
	extending chan struct{} // held while the Extend is in flight (extendingLocked)
	now       time.Time     // when the Extend was sent
	res       core.ExtendResult
	err       error
	exclusive bool // it held extending, and so sent the Extend
	cut       bool // cut off by the deadline
}

// planTickLocked decides what a tick at now does: nothing (the lease ended, a refresh is in
// flight, or none is due yet: the timer is set again), lose the lease at its stop point
// (notify and release, either may be nil, to run once l.mu is released), or start a refresh
// (r, counted in l.running and marked refreshing). l.mu must be held.
func (l *lease) planTickLocked(now time.Time) (r *refreshCall, notify, release func()) {
	if l.ended || l.released {
		return nil, nil, nil
	}
	if !now.Before(l.stopAtLocked()) {
		notify, release = l.loseAtStopLocked()
		return nil, notify, release
	}
	if l.refreshing {
		// Lease.Extend reset the timer while a refresh waits for it; that refresh will set the
		// timer again when it is done.
		return nil, nil, nil
	}
	if l.stopped || now.Before(l.nextRefresh) {
		l.timer.Reset(l.nextWakeLocked(now))
		return nil, nil, nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), l.stopAtLocked())
	l.cancel = cancel
	l.refreshing = true
	l.running.Add(1)
	return &refreshCall{ctx: ctx, cancel: cancel, extending: l.extendingLocked(), now: now}, nil, nil
}

// refresh sends the refresh r, applies its outcome, sets the timer again and reports events.
func (l *lease) refresh(r *refreshCall) {
	l.sendRefresh(r)
	l.mu.Lock()
	notify, failed, recovered := l.applyRefreshLocked(r)
	if !l.ended && !l.released {
		l.timer.Reset(l.nextWakeLocked(time.Now()))
	}
	l.mu.Unlock()
	if r.exclusive {
		<-r.extending // only now: the deadline set above is the latest call's
	}
	l.running.Done()
	switch {
	case failed != nil:
		l.event(EventRefreshFailed, failed)
	case recovered != nil && notify == nil:
		l.event(EventRefreshRecovered, fmt.Errorf("leasehold: refresh %s: recovered after %w", quoteKey(l.p.key), recovered))
	}
	if r.err == nil && notify == nil {
		l.event(EventRefreshed, nil)
	}
	if notify != nil {
		notify()
	}
}

// sendRefresh sends r's Extend once no Lease.Extend is in flight, unless r's ctx ends first
// (Release, or the deadline), and records the outcome in r. l.mu must not be held.
func (l *lease) sendRefresh(r *refreshCall) {
	select {
	case r.extending <- struct{}{}:
		r.exclusive = true
		r.now = time.Now()
		r.res, r.err = l.p.store.Extend(r.ctx, l.req)
	case <-r.ctx.Done(): // Release, or the deadline, came while a Lease.Extend was in flight
		r.err = r.ctx.Err()
	}
	// Cut off by the deadline: what failed before says more (a dead server's connection
	// refused, say, rather than the deadline of the retry in flight).
	r.cut = r.err != nil && errors.Is(r.ctx.Err(), context.DeadlineExceeded) && errors.Is(r.err, context.DeadlineExceeded)
	r.cancel()
}

// applyRefreshLocked applies r's outcome to the lease: a new deadline, a loss (notify, to run
// once l.mu is released), or a failure to retry sooner. It returns the error to report as the
// first failure of a run, or the run of failures that r ended. l.mu must be held.
func (l *lease) applyRefreshLocked(r *refreshCall) (notify func(), failed, recovered error) {
	l.cancel = nil
	l.refreshing = false
	switch {
	case r.err == nil && r.res.Fence != l.p.fence:
		notify = l.loseLocked("refresh", fmt.Errorf("the holder now holds a newer grant (fence %d)", r.res.Fence))
	case r.err == nil:
		l.deadline = r.now.Add(l.p.cfg.ttl - drift(l.p.cfg.ttl))
		l.nextRefresh = r.now.Add(l.p.cfg.refreshInterval)
		if l.failures > 0 {
			recovered = &refreshError{n: l.failures, last: l.lastFailure}
			l.failures, l.lastFailure = 0, nil
		}
	case errors.Is(r.err, ErrLost), errors.Is(r.err, ErrClosed):
		notify = l.loseLocked("refresh", r.err)
	default:
		failed = l.refreshFailedLocked(r)
	}
	return notify, failed, recovered
}

// refreshFailedLocked counts r's failure (unless Release or StopRefresh aborted it), caps the
// deadline at what r may have set if it was sent, and plans the retry: sooner than a refresh,
// within half the time left. It returns the error to report when r is the first failure of a
// run. l.mu must be held.
func (l *lease) refreshFailedLocked(r *refreshCall) (failed error) {
	if !l.stopped { // not aborted by Release or StopRefresh
		l.failures++
		if !r.cut || l.lastFailure == nil {
			l.lastFailure = r.err
		}
		if l.failures == 1 {
			failed = fmt.Errorf("leasehold: refresh %s: %w", quoteKey(l.p.key), r.err)
		}
	}
	if r.exclusive {
		// Sent: it may have gone through, its reply lost, and the store then ends the lease
		// a TTL after it, sooner than the deadline a longer Lease.Extend set.
		l.capDeadlineLocked(r.now, l.p.cfg.ttl)
	}
	after := time.Now()
	l.nextRefresh = after.Add(max(min(l.p.cfg.refreshInterval, l.stopAtLocked().Sub(after)/2), time.Millisecond))
	return failed
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

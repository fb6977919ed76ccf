package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/core"
)

// stall takes a permit without refresh and a short TTL, then stalls for twice the TTL without
// looking at the lease, as a process in a long pause would, and shows what the lease reports when
// it wakes. The pause ignores the end of the run (workCtx) but not an interrupt (runCtx).
func (d *demo) stall(workCtx, runCtx context.Context, name string) {
	l, err := d.stallPool.Acquire(workCtx, 1)
	if err != nil {
		if workCtx.Err() == nil {
			d.problem("%s: acquire the lease to let expire: %v", name, err)
		}
		return
	}
	d.poolAcquired.Add(1)
	d.mu.Lock()
	d.stalled = true
	d.mu.Unlock()
	pause := 2 * d.stallTTL
	d.event(l, happening{who: name, what: "acquired", delta: 1, note: fmt.Sprintf("no refresh, TTL %v; now stalls %v without checking", d.stallTTL, pause)})
	sleep(runCtx, nil, pause)

	// What the lease says when its holder wakes: by now its timer has declared it lost.
	var doneClosed bool
	select {
	case <-l.Done():
		doneClosed = true
	default:
	}
	errSeen := l.Err()
	d.event(l, happening{who: name, what: "woke", note: fmt.Sprintf("Done() closed: %v; Err() wraps core.ErrLost: %v", doneClosed, errors.Is(errSeen, core.ErrLost))})
	relErr := l.Release(context.WithoutCancel(runCtx))
	if relErr == nil && runCtx.Err() != nil {
		d.event(l, happening{who: name, what: "released", delta: -1, note: "interrupted before the lease expired"})
		return
	}
	var lostErr error
	if errors.Is(relErr, core.ErrLost) {
		// The loss has been handed to OnLost by now, on a goroutine of its own.
		lostErr = d.waitLost()
	}
	d.event(l, happening{who: name, what: "Release()", note: "returned " + errString(relErr)})
	if latest := d.store.record(poolKey).maxFence; latest > l.Fence() {
		d.event(l, happening{who: name, what: "fenced", fenceNote: latest,
			note: "a resource that has seen fence %s refuses this holder's writes"})
	}

	if !doneClosed || errSeen == nil {
		// Not a failure: the contract only promises that Release reports the loss at the latest.
		d.note("the expired lease's loss was reported only by Release: its timer ran more than %v late", d.stallTTL)
	}
	ok := true
	check := func(good bool, format string, args ...any) {
		if !good {
			ok = false
			d.problem("the expired lease: "+format, args...)
		}
	}
	check(errors.Is(relErr, core.ErrLost), "Release() = %v, want an error wrapping core.ErrLost", relErr)
	check(errors.Is(l.Err(), core.ErrLost), "Err() after Release = %v, want an error wrapping core.ErrLost", l.Err())
	check(errors.Is(lostErr, core.ErrLost), "OnLost got %v, want an error wrapping core.ErrLost", lostErr)
	d.mu.Lock()
	d.leaseLost = ok
	d.mu.Unlock()
}

// onLost is the OnLost callback of the expiring lease: it prints the loss and hands it to stall.
func (d *demo) onLost(l core.Lease, err error) {
	d.mu.Lock()
	d.lostAt = time.Since(d.start)
	d.mu.Unlock()
	d.event(l, happening{who: workerName(1), what: "LOST", delta: -1, note: "OnLost: " + err.Error()})
	select {
	case d.lost <- err:
	default: // a second call would be a library bug; stall reports the first
	}
}

// waitLost returns the error OnLost reported, or nil if it did not run within a second.
func (d *demo) waitLost() error {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case err := <-d.lost:
		return err
	case <-t.C:
		return nil
	}
}

// errString returns err's message, or "nil".
func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

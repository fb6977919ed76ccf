package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/core"
)

// busy is what the key is when the lease could not be had: busy for run; led for elect. With
// several keys, it names the busy one. by, when not "", says who holds it (holdersText).
func (c *runConfig) busy(by string) string {
	if by != "" {
		by = " (" + by + ")"
	}
	if c.elect {
		return fmt.Sprintf("%q has a leader%s", c.key, by)
	}
	return fmt.Sprintf("%q is busy%s", c.refusedKey(), by)
}

// holdersOf asks store who holds key, within a second, for the busy line: holdersText of its
// snapshot, or "" if the store cannot tell in time.
func holdersOf(ctx context.Context, store core.Store, key string) string {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	snap, err := store.Inspect(ictx, key)
	if err != nil {
		return ""
	}
	return holdersText(snap)
}

// holderValueWidth is the most of a holder's value the busy line shows.
const holderValueWidth = 80

// holdersText says who holds the key snap describes: its first holder, by value (what it said of
// itself: run's -value, by default host, pid and command) or else its id, and how many more;
// with no holder, the lock delay that keeps it closed; "" when it is free by now.
func holdersText(snap core.Snapshot) string {
	name := func(holder, value string) string {
		if value != "" {
			return quoteValue(value, holderValueWidth)
		}
		return "holder " + plainOrQuoted(holder)
	}
	switch {
	case len(snap.Leases) == 1:
		return "held by " + name(snap.Leases[0].Holder, snap.Leases[0].Value)
	case len(snap.Leases) > 1:
		return fmt.Sprintf("held by %s and %d more", name(snap.Leases[0].Holder, snap.Leases[0].Value), len(snap.Leases)-1)
	case len(snap.Delayed) > 0:
		d := snap.Delayed[0]
		return fmt.Sprintf("closed %v more by the lock delay of holder %s, whose lease expired unreleased", d.Left.Round(time.Millisecond), plainOrQuoted(d.Holder))
	}
	return ""
}

// noneTaken ends the busy line of a run on several keys: none was acquired. For one key, "".
func (c *runConfig) noneTaken() string {
	if !c.multi() {
		return ""
	}
	return fmt.Sprintf("; none of %s acquired", c.keysText())
}

// mismatch says why err, a refusal wrapping core.ErrLimitMismatch, refused the lease, and how
// to get it: with the key's limit, or once nobody holds the key.
func (c *runConfig) mismatch(err error) string {
	var lm *core.LimitMismatchError
	if !errors.As(err, &lm) {
		return fmt.Sprintf("%v: use the key's -limit, or wait until nobody holds %q", err, c.key)
	}
	if c.elect {
		return fmt.Sprintf("%q is held under limit %d, and an election has limit 1: campaign on a key that only elect uses, or wait until nobody holds it",
			c.key, lm.Held)
	}
	if c.multi() {
		return fmt.Sprintf("%q is held under limit %d, and a run on several keys takes each as a mutex (limit 1): leave it out, or wait until nobody holds it",
			c.refusedKey(), lm.Held)
	}
	return fmt.Sprintf("%q is held under limit %d, this run has -limit %d: use the key's limit (-limit %d), or wait until nobody holds it",
		c.key, lm.Held, lm.Requested, lm.Held)
}

// notAcquired says why the lease could not be had (err, from acquire; interruptedWaiting: a
// signal ended the wait), after releasing any grant the store may have made all the same, and
// returns run's exit status.
func (r *leaseRun) notAcquired(ctx context.Context, store core.Store, err error, interruptedWaiting bool) int {
	r.releaseAbandoned(ctx, store)
	switch {
	case interruptedWaiting:
		return r.interrupted()
	case errors.Is(err, core.ErrInvalid):
		r.say("%v", err)
		return exitUsage
	case errors.Is(err, core.ErrLimitMismatch):
		r.say("%s; nothing acquired, the command not started", r.cfg.mismatch(err))
		return exitConfig
	case errors.Is(err, core.ErrNotAcquired) && r.cfg.oneTry():
		r.say("%s%s", r.cfg.busy(holdersOf(ctx, store, r.cfg.refusedKey())), r.cfg.noneTaken())
		return exitBusy
	case errors.Is(err, core.ErrNotAcquired):
		r.say("%s: not acquired within %v%s", r.cfg.busy(holdersOf(ctx, store, r.cfg.refusedKey())), r.cfg.wait.d, r.cfg.noneTaken())
		return exitBusy
	}
	r.say("%v", err)
	return exitFail
}

// releaseAbandoned releases on store, each within the TTL and at most 5s, the grants the store
// may have made although their replies were lost. The library releases such a grant in the
// background, which this process's exit would cut short, leaving the key held until its TTL.
func (r *leaseRun) releaseAbandoned(ctx context.Context, store core.Store) {
	for {
		select {
		case req := <-r.cfg.abandoned:
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(r.cfg.ttl, 5*time.Second))
			store.Release(rctx, req)
			cancel()
		default:
			return
		}
	}
}

package primitives

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/leasehold/leasehold/core"
)

// Election is a leader election on one key: a Mutex whose lease carries the leader's value and
// whose fence is the term. At most one campaigner leads at a time, across every process that
// shares the store; each new leader's term is strictly greater than every earlier one's, so a
// resource that remembers the highest term it has seen rejects a deposed leader's writes.
//
// What leadership promises is what a lease promises: the leader's lease is held by the store
// until it is released or expires. A leader that stalls (a GC pause, a partition) past its
// lease's deadline may still believe it leads while a successor does: it learns of the loss
// through the lease (Done, Err, OnLost, LeaseContext), at once when the loss is known and by
// its deadline otherwise. Only the term, checked by the resource written to, makes that stale
// leader harmless.
//
// An Election is safe for concurrent use.
type Election struct {
	mutex *Mutex
	watch core.Watcher // nil when the store cannot announce changes
}

// Leader is an election's leader as the store reports it: the value it campaigned with, its
// holder id, and its term (the lease's fence). The zero Leader means no leader.
type Leader struct {
	Value  string
	Holder string
	Fence  uint64
}

// NewElection returns an election on key. The options of a Mutex apply (WithTTL,
// WithRefreshInterval, WithOnLost …); WithValue does not, as each Campaign names its own value.
// Unless WithAcquireTimeout is given, Campaign waits until it leads or its ctx ends. It checks
// its arguments and returns an error wrapping ErrInvalid that names the bad one; it does
// not touch the store.
func NewElection(store Store, key string, opts ...Option) (*Election, error) {
	opts = append([]Option{WithAcquireTimeout(math.MaxInt64)}, opts...)
	sem, err := newSemaphore(store, resource{kind: "election", key: key, limit: 1}, opts)
	if err != nil {
		return nil, err
	}
	el := &Election{mutex: &Mutex{sem: sem}}
	el.watch, _ = store.(core.Watcher)
	return el, nil
}

// Key returns the election's key.
func (el *Election) Key() string { return el.mutex.sem.key }

// Campaign waits until the caller leads, and returns the leader's lease: its Value is value, its
// Fence the term. The lease is refreshed in the background; Release resigns, and the next
// campaigner (the first in line, on a store that keeps one) leads at once. value is at most
// MaxValueLen bytes (otherwise an error wrapping ErrInvalid, and nothing is sent).
// Errors and costs are those of Mutex.Acquire.
func (el *Election) Campaign(ctx context.Context, value string) (Lease, error) {
	if err := checkValue(value); err != nil {
		return nil, fmt.Errorf("leasehold: campaign %s: %w", quoteKey(el.Key()), err)
	}
	sem := *el.mutex.sem
	sem.cfg.value = value
	return sem.Acquire(ctx, 1)
}

// Leader reports the current leader; ok is false when there is none. One store round trip.
func (el *Election) Leader(ctx context.Context) (ld Leader, ok bool, err error) {
	ld, _, ok, err = el.leader(ctx)
	return ld, ok, err
}

// leader reports the current leader and how long its lease has left by the store's clock.
func (el *Election) leader(ctx context.Context) (Leader, time.Duration, bool, error) {
	snap, err := el.mutex.sem.store.Inspect(ctx, el.Key())
	if err != nil {
		return Leader{}, 0, false, fmt.Errorf("leasehold: leader %s: %w", quoteKey(el.Key()), err)
	}
	if len(snap.Leases) == 0 {
		return Leader{}, 0, false, nil
	}
	l := snap.Leases[len(snap.Leases)-1] // the latest term, should limits have disagreed
	return Leader{Value: l.Value, Holder: l.Holder, Fence: l.Fence}, l.TTL, true, nil
}

// Observe reports the election's leader as it changes: the current one at once (the zero
// Leader when there is none), then each change, in order; the channel is closed when ctx ends.
// A change is a new leader (a new term) or none. Terms only grow; changes closer together than
// one read of the store may come as one, the latest.
//
// On a store that announces changes (core.Watcher: memory, Redis) Observe reads the store when
// told of one — a resignation or a new leader is seen within a round trip — and when the
// leader's lease would expire, so a leader that died is seen within a TTL; it sends nothing in
// between. Otherwise, or while the store's announcements are not reliable, it also reads every
// ten retry intervals (100ms by default). It runs one goroutine until ctx ends; a failed read is
// retried likewise.
func (el *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	go el.observe(ctx, out)
	return out
}

func (el *Election) observe(ctx context.Context, out chan<- Leader) {
	defer close(out)
	var w core.Wake
	if el.watch != nil {
		w, _ = el.watch.Watch(ctx, el.Key()) // without it: polling
	}
	if w != nil {
		defer w.Close()
	}
	// Ten retry intervals, kept within MaxDuration: ten of the longest would overflow into
	// a negative wait, and a read loop.
	poll := 10 * min(el.mutex.sem.cfg.retryInterval, MaxDuration/10)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	var last Leader
	first := true
	for {
		ld, ttl, _, err := el.leader(ctx)
		next := poll
		if err == nil {
			if first || ld != last {
				select {
				case out <- ld:
				case <-ctx.Done():
					return
				}
				first, last = false, ld
			}
			if w != nil && w.Reliable() {
				next = MaxDuration
			}
			if ld != (Leader{}) {
				next = min(next, ttl+time.Millisecond)
			}
		}
		timer.Reset(next)
		var changed <-chan struct{}
		if w != nil {
			changed = w.C()
		}
		select {
		case <-changed:
		case <-timer.C:
		case <-ctx.Done():
			return
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

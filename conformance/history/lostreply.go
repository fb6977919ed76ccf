package history

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/core"
)

// LostReplies is the lost-reply fault for a Store without a network to lose them on (the
// memory store; any Store, in process): while on, every Every-th call (Acquire, Extend,
// Release; counted across the Stores it wraps) runs on its Store to its end whatever its ctx
// does, as a server runs a request it was sent, and its reply is lost: the caller gets its
// ctx's error once its ctx ends. With Retry, the call is then sent once more, 5 ms later, as a
// client library that retries a command whose reply it did not get does after its backoff
// (by then, as a rule, after the caller's own give-back). A call whose ctx never ends keeps its reply. The zero value is off; Wait waits
// for the calls it sent on after their callers left.
type LostReplies struct {
	Every int
	Retry bool

	on       atomic.Bool
	n        atomic.Int64
	inflight atomic.Int64 // retries still to run (a counter, not a WaitGroup: a give-back may start one while Wait waits)
}

// Set turns the fault on or off.
func (l *LostReplies) Set(on bool) { l.on.Store(on) }

// Wait returns when every call the fault sent on after its caller left has returned.
func (l *LostReplies) Wait() {
	for l.inflight.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
}

// Wrap returns st with the fault (a core.Notifier's Register passes through).
func (l *LostReplies) Wrap(st core.Store) core.Store {
	ls := &lossy{Store: st, l: l}
	if n, ok := st.(core.Notifier); ok {
		return &lossyNotifier{lossy: ls, n: n}
	}
	return ls
}

type lossy struct {
	core.Store
	l *LostReplies
}

type lossyNotifier struct {
	*lossy
	n core.Notifier
}

func (s *lossyNotifier) Register(ctx context.Context, req core.AcquireRequest) (core.Wake, error) {
	return s.n.Register(ctx, req)
}

// lose reports whether the call on ctx loses its reply.
func (l *LostReplies) lose(ctx context.Context) bool {
	return l.Every > 0 && ctx.Done() != nil && l.on.Load() && l.n.Add(1)%int64(l.Every) == 0
}

// lost runs call to its end, then returns ctx's error once ctx has ended, and with Retry runs
// call once more, beside the caller.
func lost[T any](l *LostReplies, ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	call(context.WithoutCancel(ctx))
	<-ctx.Done()
	if l.Retry {
		l.inflight.Add(1)
		go func() {
			defer l.inflight.Add(-1)
			time.Sleep(5 * time.Millisecond)
			call(context.WithoutCancel(ctx))
		}()
	}
	var zero T
	return zero, ctx.Err()
}

func (s *lossy) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	if !s.l.lose(ctx) {
		return s.Store.Acquire(ctx, req)
	}
	return lost(s.l, ctx, func(ctx context.Context) (core.AcquireResult, error) { return s.Store.Acquire(ctx, req) })
}

func (s *lossy) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	if !s.l.lose(ctx) {
		return s.Store.Extend(ctx, req)
	}
	return lost(s.l, ctx, func(ctx context.Context) (core.ExtendResult, error) { return s.Store.Extend(ctx, req) })
}

func (s *lossy) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	if !s.l.lose(ctx) {
		return s.Store.Release(ctx, req)
	}
	return lost(s.l, ctx, func(ctx context.Context) (bool, error) { return s.Store.Release(ctx, req) })
}

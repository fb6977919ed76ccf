package redisdriver

import (
	"context"

	"github.com/leasehold/leasehold/core"
)

var errClosed = core.ErrClosed

var (
	_ core.Store    = (*Base)(nil)
	_ core.Notifier = (*Base)(nil)
)

// Acquire implements core.Store.Acquire: one script call.
func (b *Base) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	r, err := b.run(ctx, "acquire", req.Key, Acquire, AcquireArgs(req))
	if err != nil {
		return core.AcquireResult{}, err
	}
	res, err := ParseAcquire(r)
	return res, b.wrap("acquire", req.Key, err)
}

// Extend implements core.Store.Extend: one script call.
func (b *Base) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	r, err := b.run(ctx, "extend", req.Key, Extend, ExtendArgs(req))
	if err != nil {
		return core.ExtendResult{}, err
	}
	res, err := ParseExtend(r)
	return res, b.wrap("extend", req.Key, err)
}

// Release implements core.Store.Release: one script call, which publishes the freed permits
// to every process subscribed to the key.
func (b *Base) Release(ctx context.Context, key, holder string) (bool, error) {
	r, err := b.run(ctx, "release", key, Release, b.layout.ReleaseArgs(key, holder))
	if err != nil {
		return false, err
	}
	held, err := ParseRelease(r)
	return held, b.wrap("release", key, err)
}

// Inspect implements core.Store.Inspect: one script call, which writes nothing.
func (b *Base) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	r, err := b.run(ctx, "inspect", key, Inspect, nil)
	if err != nil {
		return core.Snapshot{}, err
	}
	snap, err := ParseInspect(r)
	return snap, b.wrap("inspect", key, err)
}

// Register implements core.Notifier. The first call opens the Store's one subscription
// connection; the first waiter on a key subscribes to the key's channel.
func (b *Base) Register(ctx context.Context, key string, permits int) (core.Waiter, error) {
	if err := b.check(ctx); err != nil {
		return nil, b.wrap("register", key, err)
	}
	w, err := b.subscriptions().Register(ctx, key, permits)
	return w, b.wrap("register", key, err)
}

func (b *Base) subscriptions() *Subscriptions {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs == nil {
		var ctx context.Context
		ctx, b.cancel = context.WithCancel(context.Background())
		subs := NewSubscriptions(b.layout, nil)
		subs.ps, b.wait = b.client.Listen(ctx, subs)
		if b.closed.Load() {
			subs.Close()
		}
		b.subs = subs
	}
	return b.subs
}

// Close stops the Store's subscription connection and wakes its waiters; later operations
// return an error wrapping core.ErrClosed. The driver's client is left open. Close is idempotent.
func (b *Base) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs != nil {
		b.subs.Close()
		b.cancel()
		b.wait()
	}
	return nil
}

package redisdriver

import (
	"context"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/core"
)

var errClosed = core.ErrClosed

var (
	_ core.Store       = (*Base)(nil)
	_ core.Notifier    = (*Base)(nil)
	_ core.FenceRaiser = (*Base)(nil)
)

// Acquire implements core.Store.Acquire: one script call. The key's line is strictly FIFO: free
// permits go to the waiters in line first. A refusal with req.Wait > 0 keeps the holder's place
// in the line for req.Wait; a lease the line grants it is taken by its next Acquire, which
// renews it for its full TTL from that call. A try of a holder whose leave of the key's line is
// still being sent waits for it first.
func (b *Base) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	return b.acquire(ctx, req, Fences{})
}

// AcquireAbove implements core.FenceRaiser: Acquire, where a new grant's fence is at least floor.
// One script call.
func (b *Base) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	return b.acquire(ctx, req, Fences{Grant: floor})
}

// RaiseFence implements core.FenceRaiser: Acquire, where the lease's fence, new or held, is at
// least fence. One script call.
func (b *Base) RaiseFence(ctx context.Context, req core.AcquireRequest, fence uint64) (core.AcquireResult, error) {
	return b.acquire(ctx, req, Fences{Grant: fence, Held: fence})
}

func (b *Base) acquire(ctx context.Context, req core.AcquireRequest, f Fences) (core.AcquireResult, error) {
	if b.nLeaving.Load() > 0 {
		if err := b.awaitLeave(ctx, req.Key, req.Holder); err != nil {
			return core.AcquireResult{}, b.wrap("acquire", req.Key, err)
		}
	}
	subs := b.loadSubs()
	var try Try
	if subs != nil && req.Wait > 0 {
		try = subs.BeforeTry(req.Key, req.Holder)
	}
	var channel string
	if req.Wait > 0 {
		channel = b.layout.Channel(req.Key, b.id)
	}
	// A place is passed over when a PUBLISH to its Store reaches nobody only once the Store's
	// subscription was confirmed before the try: until then a waiter keeps its place unchecked.
	listens := b.listens && try.gen != 0
	var tryID string
	if req.Wait > 0 {
		tryID = b.id + ":" + strconv.FormatUint(b.tries.Add(1), 36)
	}
	r, err := b.run(ctx, "acquire", req.Key, Acquire, AcquireArgs(req, f, channel, listens, tryID))
	var res core.AcquireResult
	var last uint64
	if err == nil {
		res, last, err = ParseAcquire(r)
		err = b.wrap("acquire", req.Key, err)
	}
	if err != nil {
		if subs != nil {
			subs.EndTry(try)
		}
		if req.Wait > 0 {
			// The try may have reached the server and taken a place that nobody would own (its
			// caller takes an error as final), or may still reach it, after the leave, on its
			// own connection: leave, and keep that try out of the line. A grant made meanwhile
			// goes on down the line; a lease granted to the try itself is not the line's, and is
			// the caller's to release.
			b.leaveAfter(req.Key, req.Holder, LeaveTryArgs(req.Holder, tryID))
		}
		return core.AcquireResult{}, err
	}
	if subs == nil && !res.Granted && req.Wait > 0 {
		subs = b.subscriptions() // the caller is about to wait: open them now, to hear of grants
	}
	if subs != nil {
		fence := last
		if res.Granted {
			fence = res.Fence
		}
		subs.AfterTry(ctx, try, req.Key, req.Holder, res.Granted, req.Wait > 0, fence)
	}
	if !res.Granted && req.Wait > 0 && b.closed.Load() {
		// Closed while the try was out: Close may not have known of this place to give it up.
		b.leaveNow(ctx, req.Key, LeaveArgs(req.Holder, last))
	}
	return res, nil
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

// Release implements core.Store.Release: one script call, which grants the freed permits to
// the waiters at the head of the key's line and tells them: this Store's own at once, from the
// reply, and those of other processes by a message on the key's channel.
func (b *Base) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	key, holder := req.Key, req.Holder
	r, err := b.run(ctx, "release", key, Release, ReleaseArgs(req))
	if err != nil {
		return false, err
	}
	held, grants, err := ParseRelease(r)
	if err != nil {
		return false, b.wrap("release", key, err)
	}
	if subs := b.loadSubs(); subs != nil && held {
		subs.Released(key, holder)
	}
	b.granted(key, grants)
	return held, nil
}

// granted hands this Store's waiters among grants (from a script's reply) their leases.
func (b *Base) granted(key string, grants []Grant) {
	if subs := b.loadSubs(); subs != nil && len(grants) > 0 {
		subs.Granted(subs.Channel(key), grants)
	}
}

// leaveTimeout bounds a waiter's leaving the line, which runs in the background and is retried
// until then (so a Store's Close waits at most that long for what it owes the lines).
const leaveTimeout = 2 * time.Second

// leave takes holder, which gave up waiting after a refusal that reported floor, out of key's
// line in the background, passing a lease granted to it since on. Close waits for it, and sends
// those its waiters still owe.
func (b *Base) leave(key, holder string, floor uint64) {
	b.leaveAfter(key, holder, LeaveArgs(holder, floor))
}

// leaveAfter is leave with the leave script's ARGV given.
func (b *Base) leaveAfter(key, holder string, args []any) {
	b.bgMu.Lock()
	defer b.bgMu.Unlock()
	if b.bgDone {
		return
	}
	id := key + "\x00" + holder
	b.leavingMu.Lock()
	p := b.leaving[id]
	if p == nil {
		p = &pendingLeave{done: make(chan struct{})}
		b.leaving[id] = p
		b.nLeaving.Add(1)
	}
	p.n++
	b.leavingMu.Unlock()
	b.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		defer cancel()
		// A leave that fails (a connection broken, say) is sent again until leaveTimeout: the
		// place it gives up would otherwise stay until the waiter's wait lapses.
		for backoff := 10 * time.Millisecond; b.leaveNow(ctx, key, args) != nil; backoff = min(2*backoff, 200*time.Millisecond) {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
				continue
			}
			break
		}
		b.leavingMu.Lock()
		if p.n--; p.n == 0 {
			delete(b.leaving, id)
			b.nLeaving.Add(-1)
			close(p.done)
		}
		b.leavingMu.Unlock()
	})
}

// awaitLeave returns when no leave of holder on key is pending (each is bounded by
// leaveTimeout), or with ctx's error.
func (b *Base) awaitLeave(ctx context.Context, key, holder string) error {
	b.leavingMu.Lock()
	p := b.leaving[key+"\x00"+holder]
	b.leavingMu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leaveNow sends the leave script once and reports its error. It is not b.run: a closing Store
// still sends what its waiters owe the line. A leave that never gets through leaves the place to
// lapse with the waiter's wait, and a grant made meanwhile to expire with its TTL.
func (b *Base) leaveNow(ctx context.Context, key string, args []any) error {
	r, err := b.client.Run(ctx, Leave, b.layout.Keys(key), args)
	if err != nil {
		return err
	}
	if grants, err := ParseGrants(r); err == nil {
		b.granted(key, grants)
	}
	return nil
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
func (b *Base) Register(ctx context.Context, req core.AcquireRequest) (core.Waiter, error) {
	if err := b.check(ctx); err != nil {
		// The caller's refused try took a place it will not wait in: leave it.
		b.leave(req.Key, req.Holder, 0)
		return nil, b.wrap("register", req.Key, err)
	}
	subs := b.subscriptions()
	if subs == nil {
		return nil, b.wrap("register", req.Key, errClosed)
	}
	w, err := subs.Register(ctx, req)
	return w, b.wrap("register", req.Key, err)
}

func (b *Base) subscriptions() *Subscriptions {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs == nil && b.closed.Load() {
		return nil // a closed Store opens no connection: nothing would stop it
	}
	if b.subs == nil {
		var ctx context.Context
		ctx, b.cancel = context.WithCancel(context.Background())
		subs := NewSubscriptions(b.layout, b.id, nil)
		subs.leave = b.leave
		subs.ps, b.wait = b.client.Listen(ctx, subs)
		b.subs = subs
		b.subsLoaded.Store(subs)
	}
	return b.subs
}

// loadSubs returns the Subscriptions if they were opened, without locking.
func (b *Base) loadSubs() *Subscriptions { return b.subsLoaded.Load() }

// Close stops the Store's subscription connection and wakes its waiters; later operations
// return an error wrapping core.ErrClosed. The driver's client is left open. Close is idempotent.
func (b *Base) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs != nil {
		owed := b.subs.Close()
		b.cancel()
		b.wait()
		for _, l := range owed {
			b.leave(l.Key, l.Holder, l.Floor)
		}
	}
	b.bgMu.Lock()
	b.bgDone = true // later leaves are dropped: Wait follows every Add
	b.bgMu.Unlock()
	b.bg.Wait()
	return nil
}

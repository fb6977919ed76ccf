package rediscore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend/internal/waitline"
	"github.com/leasehold/leasehold/core"
)

// Acquire implements core.Store.Acquire: one script call. The key's line is strictly FIFO: free
// permits go to the waiters in line first. A refusal with req.Wait > 0 keeps the holder's place
// in the line for req.Wait; a lease the line grants it is taken by its next Acquire, which
// renews it for its full TTL from that call. A call whose ctx has ended already (or on a closed
// Store) sends nothing, and returns ctx's error (or core.ErrClosed). A try of a holder whose
// leave of the key's line is still being sent waits for it first. A try that fails or whose ctx ends in flight is followed
// by a leave, in the background, so that it leaves no place behind, and, should it still reach
// the server after that leave, takes nothing: a try that would wait, and one that would not of
// an unshared holder whose ctx can end (whose caller gives back what it may have been granted).
func (s *Store) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	return s.acquire(ctx, req, fences{})
}

// AcquireAbove implements core.FenceRaiser: Acquire, where a new grant's fence (one the line
// makes included) is at least floor; a lease the holder holds keeps its fence. One script call.
// A floor above maxFloor is core.ErrInvalid, and nothing is sent.
func (s *Store) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	return s.acquire(ctx, req, fences{grant: floor})
}

// RaiseFence implements core.FenceRaiser: Acquire, where the lease's fence, new or held, is at
// least fence. One script call. A fence above maxFloor is core.ErrInvalid, and nothing is sent.
func (s *Store) RaiseFence(ctx context.Context, req core.AcquireRequest, fence uint64) (core.AcquireResult, error) {
	return s.acquire(ctx, req, fences{grant: fence, held: fence})
}

// maxFloor is the highest fence floor the scripts honour. Lua numbers are doubles: above 2^53 a
// floor would round down (a grant below its floor) and last + 1 back to last (two grants at one
// fence). Below it are 2^32 grants of room, and the server clock in µs, which fences follow,
// reaches it in the year 2255; the fences Redlock passes are its nodes' own, far below.
const maxFloor = 1<<53 - 1<<32

// acquire is Acquire with the least fences f.
func (s *Store) acquire(ctx context.Context, req core.AcquireRequest, f fences) (core.AcquireResult, error) {
	if m := max(f.grant, f.held); m > maxFloor {
		return core.AcquireResult{}, fmt.Errorf("%w: fence %d: must be at most %d, the most this store counts exactly", core.ErrInvalid, m, uint64(maxFloor))
	}
	if err := s.check(ctx); err != nil {
		// Nothing is sent, so nothing is left to leave or give back.
		return core.AcquireResult{}, err
	}
	if err := s.leaves.AwaitHolder(ctx, req.Key, req.Holder); err != nil {
		return core.AcquireResult{}, err
	}
	waits := req.Wait > 0
	lines := s.loadLines()
	if waits && lines != nil && f == (fences{}) {
		// A grant the line made this waiter is taken without a round trip, unless the call asks
		// for fences the grant may be below (AcquireAbove, RaiseFence): the script raises it.
		if fence, left, ok := lines.takeGrant(req); ok {
			return core.AcquireResult{Granted: true, Fence: fence, TTL: left}, nil
		}
	}
	sent := time.Now()
	var t try
	if lines != nil && waits {
		t = lines.beforeTry(req.Key, req.Holder)
	}
	call := s.acquireCall(ctx, req, f, t)
	r, err := s.send(ctx, acquireScript, req.Key, acquireArgs(call, &s.durations))
	if err == nil && ctx.Err() != nil {
		// ctx ended before a driver that waits for the reply had it: the caller has gone, as
		// when ctx ends first on a driver that returns then, and is answered alike, with what
		// the try took given back below.
		err = ctx.Err()
	}
	var res core.AcquireResult
	var last uint64
	if err == nil && call.overtakes != "" {
		s.unsure.overtook(req.Key, req.Holder, call.overtakes)
	}
	if err == nil {
		res, last, err = parseAcquire(r, req.Permits, req.Limit)
		err = s.replyError(err)
	}
	if err != nil {
		s.failedTry(lines, t, call, err)
		return core.AcquireResult{}, err
	}
	if lines == nil && !res.Granted && waits {
		if sub := s.subscriber(); sub != nil { // the caller is about to wait: open it now, to hear of grants
			lines = sub.lines
		}
	}
	if lines != nil {
		out := tryOutcome{key: req.Key, holder: req.Holder, granted: res.Granted, waits: waits, fence: last,
			sent: waitline.Sent{At: sent, Req: req}}
		if res.Granted {
			out.fence = res.Fence
		}
		lines.afterTry(ctx, t, out)
	}
	if !res.Granted && waits && s.closed.Load() {
		// Closed while the try was out: Close may not have known of this place to give it up.
		s.leaveNow(ctx, req.Key, leaveArgs(req.Holder, last))
	}
	return res, nil
}

// acquireCall returns the script call of a try of req with the least fences f, t its try on
// the Store's waiters (zero: none).
func (s *Store) acquireCall(ctx context.Context, req core.AcquireRequest, f fences, t try) acquireCall {
	call := acquireCall{req: req, fences: f, overtakes: s.unsure.overtaken(req.Key, req.Holder)}
	if req.Wait > 0 {
		call.try = tryID(s.id, s.tries.Add(1))
		// A place is passed over when a PUBLISH to its Store reaches nobody only once the Store's
		// subscription was confirmed before the try: until then a waiter keeps its place unchecked.
		call.listens = s.listens && t.gen != 0
	} else if req.Unshared && ctx.Done() != nil && ctx.Err() == nil {
		// A try that will not wait, whose ctx can end while the call is still on its way: named,
		// so that the leave sent when its caller gives up keeps it from being granted should it
		// arrive after the caller's give-back (see Release). Its own name, not its holder's:
		// the holder's later tries (the next attempt, a Redlock node's raise) must still be
		// granted. A shared holder's lease is not given back, and its try is not named; nor is
		// one whose ctx has ended already, which is not sent (nothing to leave).
		call.try = tryID(s.id, s.tries.Add(1))
	}
	return call
}

// failedTry ends the try call, t on lines (nil: none), that failed with err.
func (s *Store) failedTry(lines *waiters, t try, call acquireCall, err error) {
	if lines != nil {
		lines.endTry(t)
	}
	if call.try != nil && !errors.Is(err, core.ErrLimitMismatch) && !errors.Is(err, ErrLayoutVersion) {
		// The try may have reached the server and taken a place that nobody would own (its
		// caller takes an error as final), or may still reach it, after the leave, on its
		// own connection: leave, and keep that try out of the line (a limit mismatch or another
		// layout was answered, and changed nothing: nothing to leave). A grant made meanwhile
		// goes on down the line; a lease granted to the try itself is not the line's, and is
		// the caller's to release: its Release waits for this leave, so that the try cannot
		// arrive between the two and take a lease nobody gives back.
		s.leaveWith(call.req.Key, call.req.Holder, leaveTryArgs(call.req.Holder, call.try))
	}
}

// Extend implements core.Store.Extend: one script call, which reports the lease's value as its
// latest grant set it. A lease that is not held (expired, released, or never granted) is
// core.ErrLost; Extend never revives one.
func (s *Store) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	r, err := s.run(ctx, extendScript, req.Key, extendArgs(req, &s.durations))
	if err != nil {
		return core.ExtendResult{}, err
	}
	res, err := parseExtend(r)
	return res, s.replyError(err)
}

// Release implements core.Store.Release: one script call, which grants the freed permits to
// the waiters at the head of the key's line and tells them: this Store's own at once, from the
// reply, and those of other processes by a message on the key's channel. It first waits for the
// leaves of the holder's tries this Store is still sending (see Acquire).
func (s *Store) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	// A leave of the holder's try still being sent goes first (each is bounded by waitline.LeaveBudget):
	// sent after it, the release frees what the try took should the try arrive before the
	// leave, and the leave keeps it from taking anything should it arrive after.
	if err := s.leaves.AwaitHolder(ctx, req.Key, req.Holder); err != nil {
		return false, err
	}
	r, err := s.run(ctx, releaseScript, req.Key, releaseArgs(req))
	if err != nil {
		return false, err
	}
	held, grants, err := parseRelease(r)
	if err != nil {
		return false, s.replyError(err)
	}
	if lines := s.loadLines(); lines != nil && held {
		lines.released(req.Key, req.Holder)
	}
	s.granted(req.Key, grants)
	return held, nil
}

// granted hands this Store's waiters among grants (from a script's reply) their leases.
func (s *Store) granted(key string, grants []grant) {
	if lines := s.loadLines(); lines != nil && len(grants) > 0 {
		lines.granted(lines.channel(key), grants, fromReply)
	}
}

// Inspect implements core.Store.Inspect: one script call, which writes nothing. It reports the
// leases with their values and the line's places whose wait has not ended, head first, with
// their permits and values; it first waits for the leaves of the key's line this Store is still
// sending (each bounded by waitline.LeaveBudget), so that a waiter closed here is not reported.
func (s *Store) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	if err := s.leaves.AwaitKey(ctx, key); err != nil {
		return core.Snapshot{}, err
	}
	r, err := s.run(ctx, inspectScript, key, argList{})
	if err != nil {
		return core.Snapshot{}, err
	}
	snap, err := parseInspect(r)
	return snap, s.replyError(err)
}

// Register implements core.Notifier. The first call opens the Store's one subscription
// connection; the first waiter on a key subscribes to the key's channel (a SUBSCRIBE, not waited
// for: the waiter is Reliable once the server confirms it). A Store that is closed, or a ctx
// that has ended, refuses, and the place the caller's refused try took is left in the
// background.
func (s *Store) Register(ctx context.Context, req core.AcquireRequest) (core.Wake, error) {
	if err := s.check(ctx); err != nil {
		// The caller's refused try took a place it will not wait in: leave it.
		s.leave(req.Key, req.Holder, 0)
		return nil, err
	}
	sub := s.subscriber()
	if sub == nil {
		return nil, core.ErrClosed
	}
	w, err := sub.lines.register(ctx, req)
	if err != nil && err != core.ErrClosed {
		return nil, s.clientError(ctx, time.Time{}, err)
	}
	return w, err
}

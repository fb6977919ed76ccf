package postgres

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/core"
)

// maxFloor is the highest fence floor the Store takes: PostgreSQL's bigint counter must have
// room for 2^32 grants after it.
const maxFloor = math.MaxInt64 - 1<<32

// Acquire implements core.Store.Acquire in one statement (one round trip). A request refused with
// req.Wait > 0 keeps a place in the key's FIFO line for req.Wait. A request whose limit is not the
// key's is refused with a *core.LimitMismatchError and writes nothing. On error (ctx ended, the
// connection broke), a try that would wait, and one that would not of an unshared holder (whose
// caller gives back what it may have been granted), is followed by a leave (one statement, sent
// in the background) that takes out the place it took and keeps it from taking anything should
// it arrive after the leave; Release of the holder's lease on the key waits for that leave.
// Acquire first waits for the leaves of req.Holder's earlier tries and Waiters on req.Key this
// Store is still sending (each bounded by waitline.LeaveBudget), or until ctx ends, which it then
// returns having sent nothing: a leave that arrived after the try would take out the place it
// took or give back the grant the line made it. Leaves sent by other Stores under the same
// holder id are not waited for.
func (s *Store) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	return s.acquire(ctx, req, 0, 0)
}

// AcquireAbove implements core.FenceRaiser: Acquire where a new grant's fence is at least floor. A
// floor above 2^63 − 2^32 − 1 (fences live in a bigint) is core.ErrInvalid, and changes nothing.
func (s *Store) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	return s.acquire(ctx, req, floor, 0)
}

// RaiseFence implements core.FenceRaiser: Acquire where the lease's fence, new or held, is at
// least fence. The same bound as AcquireAbove's applies.
func (s *Store) RaiseFence(ctx context.Context, req core.AcquireRequest, fence uint64) (core.AcquireResult, error) {
	return s.acquire(ctx, req, fence, fence)
}

func (s *Store) acquire(ctx context.Context, req core.AcquireRequest, floor, raise uint64) (core.AcquireResult, error) {
	if m := max(floor, raise); m > maxFloor {
		return core.AcquireResult{}, fmt.Errorf("%w: fence %d: must be at most %d", core.ErrInvalid, m, uint64(maxFloor))
	}
	if err := s.check(ctx); err != nil {
		return core.AcquireResult{}, err
	}
	// A leave of the holder's earlier try or waiter on the key, sent after this would be, would
	// take out the place this try keeps or takes, or give back a grant the line makes it.
	if err := s.leaves.AwaitHolder(ctx, req.Key, req.Holder); err != nil {
		return core.AcquireResult{}, err
	}
	plain := floor == 0 && raise == 0
	if plain {
		// A grant the line made this waiter, heard of in its notice, is taken without a round trip.
		if fence, left, ok := s.l.takeGrant(req); ok {
			return core.AcquireResult{Granted: true, Fence: fence, TTL: left}, nil
		}
	}
	args := []any{[]byte(req.Key), []byte(req.Holder), req.Permits, req.Limit, us(req.TTL), us(req.Wait),
		[]byte(req.Value), int64(floor), int64(raise), nil, nil, nil, nil, us(req.LockDelay)}
	var t try
	named := req.Wait > 0 || req.Unshared
	if req.Wait > 0 {
		t = s.l.beforeTry(req, plain)
		if t.up {
			args[10], args[11], args[12] = s.l.channel, t.pid, t.started
		}
	}
	if named {
		// A try that will not wait is named too when its holder is its caller's alone: a
		// caller told it failed gives back what it may have been granted (a Release that finds
		// nothing if the try has not arrived), and the leave sent below keeps the try from
		// being granted should it arrive after that. A shared holder's lease is not given back.
		t.id = s.newTry()
		args[9] = t.id
	}
	var (
		granted bool
		fence   int64
		retry   int64
		msg     *string
	)
	err := s.queryRow(ctx, s.n.acquire, args, &granted, &fence, &retry, &msg)
	if req.Wait > 0 && (err != nil || msg != nil) {
		s.l.endTry(t)
	}
	if err != nil {
		if named {
			// The try may have taken a place in the line or a lease, or may yet: its caller will
			// not be there to take a grant, so leave (and keep the try out should it arrive
			// later). A lease it took before the leave is its caller's to give back: Release
			// waits for the leave.
			s.leave(req.Key, req.Holder, &t.id)
		}
		return core.AcquireResult{}, s.fail(ctx, err)
	}
	if msg != nil {
		var held int
		if _, err := fmt.Sscanf(*msg, "limit %d", &held); err == nil {
			return core.AcquireResult{}, &core.LimitMismatchError{Held: held, Requested: req.Limit}
		}
		return core.AcquireResult{}, fmt.Errorf("%w: %s", core.ErrInvalid, *msg)
	}
	if req.Wait > 0 && s.l.afterTry(t, granted, uint64(fence)) {
		// Refused after Close, which its caller's Register will find: nobody will close a
		// waiter for the place this try took, so leave it now.
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.pool.Exec(lctx, s.n.leave, []byte(req.Key), []byte(req.Holder), t.id) //nolint:errcheck // a place left behind ends with its wait
		return core.AcquireResult{}, core.ErrClosed
	}
	if granted {
		return core.AcquireResult{Granted: true, Fence: uint64(fence)}, nil
	}
	return core.AcquireResult{RetryAfter: time.Duration(retry) * time.Microsecond}, nil
}

// Extend implements core.Store.Extend in one round trip.
func (s *Store) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	if err := s.check(ctx); err != nil {
		return core.ExtendResult{}, err
	}
	var (
		ok             bool
		permits, limit *int32
		fence          *int64
		value          []byte
	)
	err := s.queryRow(ctx, s.n.extend, []any{[]byte(req.Key), []byte(req.Holder), us(req.TTL)}, &ok, &permits, &fence, &limit, &value)
	if err != nil {
		return core.ExtendResult{}, s.fail(ctx, err)
	}
	if !ok {
		return core.ExtendResult{}, core.ErrLost
	}
	return core.ExtendResult{Permits: int(*permits), Fence: uint64(*fence), Limit: int(*limit), Value: string(value)}, nil
}

// Release implements core.Store.Release in one statement (one round trip), which also grants the
// freed permits to the head of the key's line and notifies each new holder's Store. It first waits
// for the leaves of the holder's tries on the key this Store is still sending (see Acquire; each
// is bounded by waitline.LeaveBudget), or until ctx ends.
func (s *Store) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	// Sent after the leave, the release ends what a try given up in flight took should the try
	// arrive before the leave; the leave keeps it from taking anything should it arrive after.
	if err := s.leaves.AwaitHolder(ctx, req.Key, req.Holder); err != nil {
		return false, err
	}
	if req.Fence > math.MaxInt64 {
		return false, nil // no lease has such a fence
	}
	var ok bool
	if err := s.queryRow(ctx, s.n.release, []any{[]byte(req.Key), []byte(req.Holder), int64(req.Fence)}, &ok); err != nil {
		return false, s.fail(ctx, err)
	}
	return ok, nil
}

// Inspect implements core.Store.Inspect in one statement (one round trip) that changes nothing. Its
// Limit is the key's (that of its leases, else of its line), or, for a key nobody holds or waits
// for, that of its last grant while the key's row is kept, else 0. It first waits for the leaves of
// the key's line this Store's waiters have sent, so that a waiter closed before Inspect is not
// listed.
func (s *Store) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	if err := s.check(ctx); err != nil {
		return core.Snapshot{}, err
	}
	if err := s.leaves.AwaitKey(ctx, key); err != nil {
		return core.Snapshot{}, err
	}
	rows, err := s.pool.Query(ctx, s.n.inspect, []byte(key))
	if err != nil {
		return core.Snapshot{}, s.fail(ctx, err)
	}
	var snap core.Snapshot
	var (
		kind, limit, permits int32
		holder, value        []byte
		fence, ttl           int64
	)
	_, err = pgx.ForEachRow(rows, []any{&kind, &limit, &holder, &permits, &fence, &ttl, &value}, func() error {
		switch kind {
		case 0:
			snap.Limit = int(limit)
			snap.Leases = append(snap.Leases, core.LeaseInfo{Holder: string(holder), Permits: int(permits),
				Fence: uint64(fence), TTL: time.Duration(ttl) * time.Microsecond, Value: string(value)})
		case 1:
			if len(snap.Leases) == 0 && len(snap.Waiters) == 0 {
				snap.Limit = int(limit) // no lease: the line's limit is the key's
			}
			snap.Waiters = append(snap.Waiters, core.WaiterInfo{Holder: string(holder), Permits: int(permits), Value: string(value)})
		case 2:
			if len(snap.Leases) == 0 && len(snap.Waiters) == 0 {
				snap.Limit = int(limit)
			}
		case 3:
			snap.Delayed = append(snap.Delayed, core.DelayInfo{Holder: string(holder), Permits: int(permits),
				Fence: uint64(fence), Left: time.Duration(ttl) * time.Microsecond})
		}
		return nil
	})
	if err != nil {
		return core.Snapshot{}, s.fail(ctx, err)
	}
	return snap, nil
}

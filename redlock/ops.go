package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/core"
)

// Acquire implements core.Store.Acquire: granted when a quorum (Quorum(req.Limit): a majority
// for a mutex) grants with validity left, with the highest fence among them (the lower ones
// raised to it in a second round, which nodes whose counters are in step make unnecessary).
// Cost: one round trip to every node, in parallel; two when the granting nodes' fences differ. Otherwise whatever was
// granted is released on every node before Acquire returns, and the refusal's RetryAfter is
// when, by the refusing nodes' word, a majority would have room. When fewer than a majority of
// nodes answer, it returns their errors joined.
//
// A failed acquire releases req.Holder on every node: a caller-chosen holder id that already
// held the lease loses it.
func (s *Store) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	start := time.Now()
	quorum := s.Quorum(req.Limit)
	// Nodes grant max(their last fence + 1, their clock in µs, FenceFloor). A floor of the local
	// clock plus fenceLead makes nodes whose counters are in step (as the last grant's raise left
	// them) grant one fence, so the raise round is rarely needed.
	first := req
	first.FenceFloor = max(req.FenceFloor, uint64(start.UnixMicro())+fenceLead)
	res := fanout(ctx, s, nil, func(c context.Context, n core.Store) (core.AcquireResult, error) { return n.Acquire(c, first) })
	var granted []int
	answered := 0
	var since time.Time // the earliest grant handed over from a node's line, counted from there
	for i, r := range res {
		if errors.Is(r.err, core.ErrInvalid) {
			return core.AcquireResult{}, wrap("acquire", req.Key, r.err)
		}
		if r.err == nil {
			answered++
			if r.v.Granted {
				granted = append(granted, i)
				if t := r.v.Since; !t.IsZero() && t.Before(start) {
					start, since = t, t
				}
			}
		}
	}
	if len(granted) >= quorum && ctx.Err() == nil {
		if fence, ok := s.raise(ctx, req, res, granted, quorum); ok && time.Since(start) < req.TTL-s.drift(req.TTL) {
			return core.AcquireResult{Granted: true, Fence: fence, Since: since}, nil
		}
	}
	// No valid majority: give back whatever was granted, on every node (one that timed out may
	// have granted too).
	s.releaseAll(ctx, req.Key, req.Holder)
	if err := ctx.Err(); err != nil {
		return core.AcquireResult{}, wrap("acquire", req.Key, err)
	}
	if answered < quorum {
		return core.AcquireResult{}, wrap("acquire", req.Key, fmt.Errorf("%d of %d nodes answered, %d needed: %w", answered, len(s.nodes), quorum, nodeErrors(res)))
	}
	return core.AcquireResult{RetryAfter: retryAfter(res, quorum)}, nil
}

// fenceLead is how far ahead of the local clock, in µs, a first round asks new grants' fences
// to be: more than the clocks of this process and the nodes are apart.
const fenceLead = uint64(time.Second / time.Microsecond)

// raise brings the granting nodes whose fence is below the highest up to it, and reports the
// fence and whether a majority now holds the lease at that fence.
func (s *Store) raise(ctx context.Context, req core.AcquireRequest, res []result[core.AcquireResult], granted []int, quorum int) (uint64, bool) {
	var fence uint64
	for _, i := range granted {
		fence = max(fence, res[i].v.Fence)
	}
	var low []int
	at := 0
	for _, i := range granted {
		if res[i].v.Fence == fence {
			at++
		} else {
			low = append(low, i)
		}
	}
	if len(low) > 0 {
		up := req
		up.MinFence = fence
		raised := fanout(ctx, s, low, func(c context.Context, n core.Store) (core.AcquireResult, error) { return n.Acquire(c, up) })
		for _, i := range low {
			if r := raised[i]; r.err == nil && r.v.Granted && r.v.Fence == fence {
				at++
			}
		}
	}
	return fence, at >= quorum
}

// retryAfter is when a quorum of nodes would have room: the quorum-th shortest wait among
// the nodes that answered (a node that granted, and was released, has room now).
func retryAfter(res []result[core.AcquireResult], quorum int) time.Duration {
	var waits []time.Duration
	for _, r := range res {
		if r.err == nil {
			waits = append(waits, r.v.RetryAfter)
		}
	}
	if len(waits) < quorum {
		return 0
	}
	slices.Sort(waits)
	return waits[quorum-1]
}

// releaseAll releases holder's lease, whatever its fence, on every node, with a context that
// outlives the caller's for at most the node timeout: a grant must not be left to expire because
// the caller gave up. (A node that timed out may have granted with a fence it never reported.)
func (s *Store) releaseAll(ctx context.Context, key, holder string) {
	req := core.ReleaseRequest{Key: key, Holder: holder}
	fanout(context.WithoutCancel(ctx), s, nil, func(c context.Context, n core.Store) (bool, error) { return n.Release(c, req) })
}

// Extend implements core.Store.Extend: the lease is kept when a quorum (for the key's limit)
// extends it with validity left. When a majority can no longer be had because nodes say the lease is gone, it
// returns an error wrapping core.ErrLost; when nodes fail otherwise, their errors joined.
func (s *Store) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	start := time.Now()
	res := fanout(ctx, s, nil, func(c context.Context, n core.Store) (core.ExtendResult, error) { return n.Extend(c, req) })
	var out core.ExtendResult
	ok, lost := 0, 0
	for _, r := range res {
		switch {
		case r.err == nil:
			ok++
			out.Permits = r.v.Permits
			out.Fence = max(out.Fence, r.v.Fence)
			out.Limit = max(out.Limit, r.v.Limit)
		case errors.Is(r.err, core.ErrLost):
			lost++
		}
	}
	if err := ctx.Err(); err != nil {
		return core.ExtendResult{}, wrap("extend", req.Key, err)
	}
	quorum := s.Quorum(out.Limit)
	if ok >= quorum && time.Since(start) < req.TTL-s.drift(req.TTL) {
		return out, nil
	}
	if lost > len(s.nodes)-quorum {
		return core.ExtendResult{}, wrap("extend", req.Key, fmt.Errorf("%w: %d of %d nodes no longer hold it", core.ErrLost, lost, len(s.nodes)))
	}
	return core.ExtendResult{}, wrap("extend", req.Key, fmt.Errorf("%d of %d nodes extended, %d needed: %w", ok, len(s.nodes), quorum, nodeErrors(res)))
}

// Release implements core.Store.Release on every node: each ends the holder's lease with
// req.Fence (the fence a quorum was raised to). It reports whether a majority held the lease;
// when fewer than a majority answer, it returns their errors joined.
func (s *Store) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	key := req.Key
	res := fanout(ctx, s, nil, func(c context.Context, n core.Store) (bool, error) { return n.Release(c, req) })
	held, answered := 0, 0
	for _, r := range res {
		if r.err == nil {
			answered++
			if r.v {
				held++
			}
		}
	}
	if held >= s.quorum {
		return true, nil
	}
	if answered < s.quorum {
		return false, wrap("release", key, fmt.Errorf("%d of %d nodes answered: %w", answered, len(s.nodes), nodeErrors(res)))
	}
	return false, nil
}

// Inspect implements core.Store.Inspect: a lease is reported when a quorum of nodes hold it,
// with the highest fence among them and the TTL for which a quorum still holds it.
func (s *Store) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	res := fanout(ctx, s, nil, func(c context.Context, n core.Store) (core.Snapshot, error) { return n.Inspect(c, key) })
	type seen struct {
		info core.LeaseInfo
		ttls []time.Duration
	}
	by := map[string]*seen{}
	var snap core.Snapshot
	answered := 0
	for _, r := range res {
		if r.err != nil {
			continue
		}
		answered++
		snap.Limit = max(snap.Limit, r.v.Limit)
		for _, l := range r.v.Leases {
			e := by[l.Holder]
			if e == nil {
				e = &seen{info: l}
				by[l.Holder] = e
			}
			e.info.Fence = max(e.info.Fence, l.Fence)
			e.ttls = append(e.ttls, l.TTL)
		}
	}
	if answered < s.quorum {
		return core.Snapshot{}, wrap("inspect", key, fmt.Errorf("%d of %d nodes answered: %w", answered, len(s.nodes), nodeErrors(res)))
	}
	quorum := s.Quorum(snap.Limit)
	for _, e := range by {
		if len(e.ttls) < quorum {
			continue
		}
		slices.SortFunc(e.ttls, func(a, b time.Duration) int { return cmp.Compare(b, a) })
		e.info.TTL = e.ttls[quorum-1]
		snap.Leases = append(snap.Leases, e.info)
	}
	slices.SortFunc(snap.Leases, func(a, b core.LeaseInfo) int { return cmp.Compare(a.Fence, b.Fence) })
	return snap, nil
}

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

// Acquire implements core.Store.Acquire: it grants when QuorumFor(req.Permits, req.Limit) nodes (a
// majority, for a mutex) grant with validity left: at the fence a quorum of them holds it at, or
// else the highest among them. It costs one round trip to every node in parallel, returning at
// the latency of the quorum-th fastest node (bounded by the node timeout), and a second round
// when the granting nodes' fences differ.
//
// A refusal releases what nodes granted before Acquire returns, keeps no place in any node's line,
// and says in RetryAfter when, by the refusing nodes, a quorum would have room. Acquire returns the
// nodes' errors joined only when failures alone leave no quorum, and an error wrapping
// core.ErrLimitMismatch when enough nodes hold the key under another limit; failures and refusals
// that together decide are a refusal. A refused or failed acquire releases req.Holder on the nodes
// that granted or failed: a caller-chosen holder id that held the lease loses it there. The package
// doc says how stragglers are settled.
func (s *Store) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	if req.Limit == core.MaxLimit && req.Permits > 1 && req.Permits < req.Limit {
		return core.AcquireResult{}, fmt.Errorf("%w: redlock: permits %d on a key of limit core.MaxLimit, which is shared-exclusive: ask for 1 or all", core.ErrInvalid, req.Permits)
	}
	start := time.Now()
	quorum := s.QuorumFor(req.Permits, req.Limit)
	timeout := s.nodeTimeout(req.TTL)
	lease := keyHolder{req.Key, req.Holder}
	st := s.newSettle(req, timeout)
	watches, seen := s.waiting(lease)
	// Nodes grant max(their last fence + 1, their clock in µs, floor). A floor of the local
	// clock plus fenceLead makes nodes whose counters are in step (as the last grant's raise left
	// them) grant one fence, so the raise round is rarely needed.
	floor := uint64(start.UnixMicro()) + fenceLead
	res := s.acquireRound(ctx, req, floor, quorum, timeout, st)
	t, err := tallyAcquire(res)
	if err != nil {
		st.decide(0, true) // the holder holds other permits: nothing of this call to undo
		return core.AcquireResult{}, err
	}
	if t.mismatched > len(s.nodes)-quorum {
		// So many nodes hold the key under another limit, and changed nothing, that no quorum
		// can grant under this one.
		st.decide(0, false)
		s.releaseOn(ctx, lease, t.mismatchGiveBack(res, req.Unshared), timeout)
		return core.AcquireResult{}, t.mismatch
	}
	if len(t.granted) >= quorum && ctx.Err() == nil {
		fence, ok := s.raise(ctx, raising{req: req, floor: floor, quorum: quorum, timeout: timeout}, res, t.granted)
		if ok && time.Since(start) < req.TTL-s.drift(req.TTL) {
			st.decide(fence, false)
			return core.AcquireResult{Granted: true, Fence: fence}, nil
		}
	}
	// No valid quorum: give back what was granted, and whatever a node that failed may have
	// granted unseen; stragglers are released as they answer.
	st.decide(0, false)
	s.releaseOn(ctx, lease, t.refusalGiveBack(res), timeout)
	if err := ctx.Err(); err != nil {
		return core.AcquireResult{}, err
	}
	if t.answered < quorum && len(t.failed) > len(s.nodes)-quorum { // failures alone leave no quorum: an error, not a refusal
		return core.AcquireResult{}, fmt.Errorf("redlock: %d of %d nodes answered, %d needed: %w", t.answered, len(s.nodes), quorum, nodeErrors(res))
	}
	for i, w := range watches {
		w.tried(seen[i], res)
	}
	return core.AcquireResult{RetryAfter: retryAfter(res, quorum)}, nil
}

// acquireRound asks every node to grant req, at a fence of at least floor, and
// returns their answers once a quorum is decided (acquireDecided) or the node timeout ends; st
// settles the answers that come later.
func (s *Store) acquireRound(ctx context.Context, req core.AcquireRequest, floor uint64, quorum int, timeout time.Duration, st *settle) []result[core.AcquireResult] {
	first := req
	// No node keeps a place for the caller: each node's line is its own, in its own arrival
	// order, so nodes would grant the freed permits to different waiters and none reach a
	// quorum. Redlock waiters watch the key (WatchAcquire) and try again when a change on the
	// nodes that refused them could let a quorum grant.
	first.Wait = 0
	decide := func(rs []result[core.AcquireResult]) bool { return acquireDecided(rs, quorum) }
	res, c := fanout(ctx, s, round[core.AcquireResult]{timeout: timeout, decided: decide,
		call: func(c context.Context, _ int, n node) (core.AcquireResult, error) {
			return n.AcquireAbove(c, first, floor)
		}})
	st.expect(c.then(st.late))
	return res
}

// acquireTally is what the nodes answered an acquire: which granted, which failed, and how many
// answered, and refused under another limit.
type acquireTally struct {
	granted, failed []int // the nodes' indexes
	answered        int   // granted or refused, under this limit or another
	mismatched      int   // refused under another limit
	mismatch        error // the first such refusal
}

// tallyAcquire counts the nodes' answers. It returns the first node's error that wraps
// core.ErrInvalid (the holder holds other permits), which decides the acquire alone.
func tallyAcquire(res []result[core.AcquireResult]) (acquireTally, error) {
	var t acquireTally
	for i, r := range res {
		switch {
		case errors.Is(r.err, core.ErrInvalid):
			return t, r.err
		case errors.Is(r.err, core.ErrLimitMismatch):
			t.mismatch = cmp.Or(t.mismatch, r.err)
			t.mismatched++
			t.answered++
		case r.err == errNoAnswer:
		case r.err != nil:
			t.failed = append(t.failed, i)
		case r.v.Granted:
			t.answered++
			t.granted = append(t.granted, i)
		default:
			t.answered++
		}
	}
	return t, nil
}

// mismatchGiveBack is what an acquire refused for another limit releases, by node: what the
// nodes granted, at its fence, since the caller is told it failed and nobody would hold it. A
// node that failed may have granted unseen, but only an id drawn for this call (unshared) can
// be released at any fence without ending a lease its holder has on that node.
func (t acquireTally) mismatchGiveBack(res []result[core.AcquireResult], unshared bool) map[int]uint64 {
	rel := map[int]uint64{}
	for _, i := range t.granted {
		rel[i] = res[i].v.Fence
	}
	if unshared {
		for _, i := range t.failed {
			rel[i] = 0
		}
	}
	return rel
}

// refusalGiveBack is what an acquire without a valid quorum releases, by node: what the nodes
// granted, each at its fence (any fence where the raise failed), and any fence on a node that
// failed.
func (t acquireTally) refusalGiveBack(res []result[core.AcquireResult]) map[int]uint64 {
	rel := map[int]uint64{}
	for _, i := range t.granted {
		rel[i] = 0
		if res[i].err == nil {
			rel[i] = res[i].v.Fence
		}
	}
	for _, i := range t.failed {
		rel[i] = 0
	}
	return rel
}

// acquireDecided reports whether the answers so far settle an acquire: a quorum granted, so
// many refused (under another limit or not) or failed that a quorum cannot grant, or a node
// found the request invalid.
func acquireDecided(rs []result[core.AcquireResult], quorum int) bool {
	granted, not := 0, 0
	for _, r := range rs {
		switch {
		case r.err == errNoAnswer:
		case errors.Is(r.err, core.ErrInvalid):
			return true
		case r.err == nil && r.v.Granted:
			granted++
		default:
			not++
		}
	}
	return granted >= quorum || not > len(rs)-quorum
}

// fenceLead is how far ahead of the local clock, in µs, a first round asks new grants' fences
// to be: more than the clocks of this process and the nodes are apart.
const fenceLead = uint64(time.Second / time.Microsecond)

// raising is the acquire whose fences raise lifts: its request, its first round's floor, quorum
// and node timeout.
type raising struct {
	req     core.AcquireRequest
	floor   uint64
	quorum  int
	timeout time.Duration
}

// raise settles the fence of a quorum's grant and reports it, and whether a quorum now holds
// the lease at it. When a quorum of the granting nodes held the lease before this acquire, at one
// fence (below the round's floor: a re-acquire by its holder, which nodes that missed the grant
// answer afresh, above it), that is the fence, and the nodes that granted above it are given
// back; otherwise it is the highest granted, at least the round's floor (see leaseFence). Nodes
// below it are raised to it; raise records each raised node's answer in res: its new fence, or
// its error (it may have been raised unseen).
func (s *Store) raise(ctx context.Context, a raising, res []result[core.AcquireResult], granted []int) (uint64, bool) {
	req, quorum, timeout := a.req, a.quorum, a.timeout
	fence := leaseFence(res, granted, a.floor, quorum)
	var above map[int]uint64 // nil, and nothing sent, in the common case
	for _, i := range granted {
		if f := res[i].v.Fence; f > fence {
			if above == nil {
				above = map[int]uint64{}
			}
			above[i] = f
		}
	}
	s.releaseOn(ctx, keyHolder{req.Key, req.Holder}, above, timeout)
	var low []int
	at := 0
	for _, i := range granted {
		switch f := res[i].v.Fence; {
		case f == fence:
			at++
		case f < fence:
			low = append(low, i)
		}
	}
	if len(low) > 0 {
		raised, c := fanout(ctx, s, round[core.AcquireResult]{timeout: timeout, nodes: low,
			call: func(c context.Context, _ int, n node) (core.AcquireResult, error) { return n.RaiseFence(c, req, fence) }})
		c.then(nil)
		for _, i := range low {
			r := raised[i]
			if r.err == nil && !r.v.Granted {
				r.err = errors.New("raise refused") // expired meanwhile
			}
			res[i] = r
			if r.err == nil && r.v.Fence == fence {
				at++
			}
		}
	}
	return fence, at >= quorum
}

// leaseFence is the fence below floor that a quorum of the granting nodes holds the lease at
// (a fresh grant is at floor or above), or else the highest granted, and at least floor.
// Preferring the highest among fresh grants raises the nodes whose counters lag, which keeps
// them in step. When no node granted afresh, the nodes hold the holder at fences of earlier
// acquires, fewer than a quorum at each: one of them may be an overlapping re-acquire's fresh
// grant, which that acquire gives back at its fence, so the lease moves to floor, which no
// earlier acquire of this process gave out.
func leaseFence(res []result[core.AcquireResult], granted []int, floor uint64, quorum int) uint64 {
	var highest uint64
	for _, i := range granted {
		f := res[i].v.Fence
		highest = max(highest, f)
		if f >= floor {
			continue
		}
		at := 0
		for _, j := range granted {
			if res[j].v.Fence == f {
				at++
			}
		}
		if at >= quorum {
			return f
		}
	}
	return max(highest, floor)
}

// retryAfter is when a quorum of nodes would have room: the quorum-th shortest wait among
// the nodes that answered (a node that granted, and was released, has room now), counting a
// node that had not answered when the refusal was decided as having room now.
func retryAfter(res []result[core.AcquireResult], quorum int) time.Duration {
	var waits []time.Duration
	for _, r := range res {
		switch {
		case r.err == nil:
			waits = append(waits, r.v.RetryAfter)
		case r.err == errNoAnswer:
			waits = append(waits, 0)
		}
	}
	if len(waits) < quorum {
		return 0
	}
	slices.Sort(waits)
	return waits[quorum-1]
}

// releaseOn releases lease (a key and holder) on the nodes in fences, each at its fence (0: any), and
// waits for them, with a context that outlives the caller's for at most the node timeout: a
// grant must not be left to expire because the caller gave up.
func (s *Store) releaseOn(ctx context.Context, lease keyHolder, fences map[int]uint64, timeout time.Duration) {
	if len(fences) == 0 {
		return
	}
	idx := make([]int, 0, len(fences))
	for i := range fences {
		idx = append(idx, i)
	}
	_, c := fanout(context.WithoutCancel(ctx), s, round[bool]{timeout: timeout, nodes: idx,
		call: func(c context.Context, i int, n node) (bool, error) {
			return n.Release(c, core.ReleaseRequest{Key: lease.key, Holder: lease.holder, Fence: fences[i]})
		}})
	c.then(nil)
}

// releaseStray releases, in the background, the lease req names on node i: a node-local lease
// that is not the quorum's (a grant from that node's line, say), which would otherwise block
// that node until it expired. It ends within timeout.
func (s *Store) releaseStray(i int, req core.ReleaseRequest, timeout time.Duration) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		s.nodes[i].Release(ctx, req)
	}()
}

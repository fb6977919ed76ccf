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

// Extend implements core.Store.Extend: the lease is kept, at the fence Extend reports, when a
// quorum for the key's limit extends it at one fence with validity left. When nodes saying the
// lease is gone (or holding another) leave no quorum, it returns an error wrapping core.ErrLost;
// when failures do, the nodes' errors joined. A node that holds the holder at another fence has
// that node-local lease released in the background. Cost: one round trip to every node in parallel,
// at the latency of the quorum-th fastest.
func (s *Store) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	start := time.Now()
	timeout := s.nodeTimeout(req.TTL)
	decide := func(rs []result[core.ExtendResult]) bool {
		t := tallyExtend(rs)
		q := s.QuorumFor(t.permits, t.limit)
		return t.support >= q || t.support+t.unknown < q
	}
	res, c := fanout(ctx, s, round[core.ExtendResult]{timeout: timeout, decided: decide,
		call: func(c context.Context, _ int, n node) (core.ExtendResult, error) { return n.Extend(c, req) }})
	t := tallyExtend(res)
	quorum := s.QuorumFor(t.permits, t.limit)
	if err := ctx.Err(); err != nil {
		c.then(nil)
		return core.ExtendResult{}, err
	}
	if t.support < quorum {
		c.then(nil)
		if t.support+t.unknown < quorum {
			return core.ExtendResult{}, fmt.Errorf("%w: redlock: %d of %d nodes hold it at one fence, %d needed", core.ErrLost, t.support, len(s.nodes), quorum)
		}
		return core.ExtendResult{}, fmt.Errorf("redlock: %d of %d nodes extended, %d needed: %w", t.support, len(s.nodes), quorum, nodeErrors(res))
	}
	out := core.ExtendResult{Fence: t.fence, Limit: t.limit}
	stray := func(i int, r result[core.ExtendResult]) {
		if r.err == nil && r.v.Fence != t.fence {
			s.releaseStray(i, core.ReleaseRequest{Key: req.Key, Holder: req.Holder, Fence: r.v.Fence}, timeout)
		}
	}
	for i, r := range res {
		if r.err == nil && r.v.Fence == t.fence {
			out.Permits, out.Value = r.v.Permits, r.v.Value
		}
		stray(i, r)
	}
	c.then(stray)
	if time.Since(start) >= req.TTL-s.drift(req.TTL) {
		return core.ExtendResult{}, fmt.Errorf("redlock: a quorum extended after the TTL's validity: %w", nodeErrors(res))
	}
	return out, nil
}

// extendTally sums up Extend answers: the fence most nodes extended at and how many, the nodes
// whose answer could still add to it (no answer yet, or an error other than ErrLost), and the
// highest limit reported, with the permits of the lease at that fence.
type extendTally struct {
	fence   uint64
	support int
	unknown int
	limit   int
	permits int
}

func tallyExtend(rs []result[core.ExtendResult]) extendTally {
	var t extendTally
	by := map[uint64]int{}
	for _, r := range rs {
		switch {
		case r.err == nil:
			by[r.v.Fence]++
			if n := by[r.v.Fence]; n > t.support || (n == t.support && r.v.Fence < t.fence) {
				t.fence, t.support, t.permits = r.v.Fence, n, r.v.Permits
			}
			t.limit = max(t.limit, r.v.Limit)
		case !errors.Is(r.err, core.ErrLost):
			t.unknown++
		}
	}
	return t
}

// Release implements core.Store.Release: every node ends the holder's lease at req.Fence (the fence
// a quorum was raised to). It reports whether a majority held the lease, and returns as soon as the
// answers decide that; the other nodes' releases finish in the background, within the node timeout
// (500ms unless WithNodeTimeout: Release carries no TTL). When fewer than a majority answer, it
// returns their errors joined. Cost: one round trip to every node in parallel.
func (s *Store) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	decide := func(rs []result[bool]) bool {
		held, open := 0, 0
		for _, r := range rs {
			switch {
			case r.err == errNoAnswer:
				open++
			case r.err == nil && r.v:
				held++
			}
		}
		return held >= s.quorum || held+open < s.quorum
	}
	res, c := fanout(ctx, s, round[bool]{timeout: s.nodeTimeout(0), decided: decide,
		call: func(c context.Context, _ int, n node) (bool, error) { return n.Release(c, req) }})
	c.then(nil)
	if err := ctx.Err(); err != nil {
		return false, err
	}
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
		return false, fmt.Errorf("redlock: %d of %d nodes answered: %w", answered, len(s.nodes), nodeErrors(res))
	}
	return false, nil
}

// Inspect implements core.Store.Inspect: a lease is reported when a quorum of nodes hold it at one
// fence, with that fence and the TTL for which a quorum still holds it. Cost: one round trip to
// every node in parallel; when a lease's quorum has a hung node, or some nodes hold a lease (or
// keep one closed for its lock delay) but not a quorum, Inspect waits for the node timeout (500ms unless WithNodeTimeout: Inspect carries no
// TTL), and the TTL reported may then be shorter than every node's.
func (s *Store) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	res, c := fanout(ctx, s, round[core.Snapshot]{timeout: s.nodeTimeout(0), decided: s.inspectDecided,
		call: func(c context.Context, _ int, n node) (core.Snapshot, error) { return n.Inspect(c, key) }})
	c.then(nil)
	if err := ctx.Err(); err != nil {
		return core.Snapshot{}, err
	}
	by, limit, answered := tallyInspect(res)
	if answered < s.quorum {
		return core.Snapshot{}, fmt.Errorf("redlock: %d of %d nodes answered: %w", answered, len(s.nodes), nodeErrors(res))
	}
	snap := core.Snapshot{Limit: limit}
	for _, e := range by {
		if ttl, ok := onQuorum(e.ttls, s.QuorumFor(e.info.Permits, limit)); ok {
			e.info.TTL = ttl
			snap.Leases = append(snap.Leases, e.info)
		}
	}
	slices.SortFunc(snap.Leases, func(a, b core.LeaseInfo) int { return cmp.Compare(a.Fence, b.Fence) })
	snap.Delayed = s.delayedOnQuorum(res, limit)
	return snap, nil
}

// onQuorum returns the time that quorum of the nodes' times ts last at least (the quorum-th
// longest), and false when fewer than quorum nodes reported one. It sorts ts.
func onQuorum(ts []time.Duration, quorum int) (time.Duration, bool) {
	if len(ts) < quorum {
		return 0, false
	}
	slices.SortFunc(ts, func(a, b time.Duration) int { return cmp.Compare(b, a) })
	return ts[quorum-1], true
}

// delayedOnQuorum returns the leases in their lock delay on as many nodes as a grant of their
// permits needs, each with the time a quorum of them keeps it closed; a delay on fewer nodes
// closes nothing a quorum would refuse.
func (s *Store) delayedOnQuorum(res []result[core.Snapshot], limit int) []core.DelayInfo {
	var out []core.DelayInfo
	for _, e := range tallyDelayed(res) {
		if left, ok := onQuorum(e.left, s.QuorumFor(e.info.Permits, limit)); ok {
			e.info.Left = left
			out = append(out, e.info)
		}
	}
	slices.SortFunc(out, func(a, b core.DelayInfo) int { return cmp.Compare(a.Fence, b.Fence) })
	return out
}

type delayed struct {
	info core.DelayInfo
	left []time.Duration
}

// tallyDelayed gathers the nodes' delayed leases, each with the time left on each node that
// reports it.
func tallyDelayed(res []result[core.Snapshot]) map[leaseID]*delayed {
	by := map[leaseID]*delayed{}
	for _, r := range res {
		if r.err != nil {
			continue
		}
		for _, d := range r.v.Delayed {
			id := leaseID{d.Holder, d.Fence}
			if by[id] == nil {
				by[id] = &delayed{info: d}
			}
			by[id].left = append(by[id].left, d.Left)
		}
	}
	return by
}

type seen struct {
	info core.LeaseInfo
	ttls []time.Duration
}

type leaseID struct {
	holder string
	fence  uint64
}

// tallyInspect gathers the nodes' snapshots: each lease with the TTLs of the nodes holding it,
// the key's limit — the one most nodes holding leases or waiters report (the higher on a tie),
// so that a minority node's stray lease of another limit does not hide the quorum's leases;
// without any, the highest reported — and how many nodes answered.
func tallyInspect(res []result[core.Snapshot]) (by map[leaseID]*seen, limit, answered int) {
	by = map[leaseID]*seen{}
	busy := map[int]int{} // limit → nodes holding leases or waiters under it
	most := 0
	for _, r := range res {
		if r.err != nil {
			continue
		}
		answered++
		if len(r.v.Leases) > 0 || len(r.v.Waiters) > 0 || len(r.v.Delayed) > 0 {
			busy[r.v.Limit]++
			if n := busy[r.v.Limit]; n > most || (n == most && r.v.Limit > limit) {
				most, limit = n, r.v.Limit
			}
		} else if most == 0 {
			limit = max(limit, r.v.Limit)
		}
		for _, l := range r.v.Leases {
			id := leaseID{l.Holder, l.Fence}
			e := by[id]
			if e == nil {
				e = &seen{info: l}
				by[id] = e
			}
			e.ttls = append(e.ttls, l.TTL)
		}
	}
	return by, limit, answered
}

func (s *Store) inspectDecided(rs []result[core.Snapshot]) bool {
	open := 0
	for _, r := range rs {
		if r.err == errNoAnswer {
			open++
		}
	}
	by, limit, answered := tallyInspect(rs)
	if answered < s.quorum || open >= s.quorum { // an unseen lease of every permit needs a majority
		return false
	}
	for _, e := range by {
		if n, q := len(e.ttls), s.QuorumFor(e.info.Permits, limit); n < q && n+open >= q {
			return false
		}
	}
	for _, e := range tallyDelayed(rs) {
		if n, q := len(e.left), s.QuorumFor(e.info.Permits, limit); n < q && n+open >= q {
			return false
		}
	}
	return true
}

package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
)

// Acquire implements core.Store.Acquire: granted when a quorum (Quorum(req.Limit): a majority
// for a mutex) grants with validity left, with the highest fence among them (the lower ones
// raised to it in a second round, which nodes whose counters are in step make unnecessary).
// It returns as soon as the answers decide: a quorum granted, or so many refused or failed that
// a quorum can no longer grant; a hung node costs nothing while the others decide.
//
// Cost: one round trip to every node, in parallel (the latency of the quorum-th fastest node,
// bounded by the node timeout); two when the granting nodes' fences differ. On refusal whatever was granted is released, each node at the fence it granted,
// before Acquire returns, and the refusal's RetryAfter is when, by the refusing nodes' word, a
// quorum would have room. When fewer than a quorum of nodes answer, it returns their errors
// joined.
//
// Waiting: every try goes to the nodes with Wait = 0, so no node keeps a place in its line for a
// Redlock caller (nodes' lines, each in its own arrival order, would grant freed permits to
// different waiters, none of which reached a quorum), and a caller that wins leaves no place
// behind. Redlock is no core.Notifier: its waiters retry at their retry interval.
//
// Stragglers: a node that answers after the outcome is decided is settled in the background: a
// grant at another fence than the lease's (or any grant, after a refusal) is released at the
// fence it was granted; a node that failed after a refusal is released at any fence (it may have
// granted unseen). Each such call ends within the node timeout, and its release within one more.
//
// A failed acquire releases req.Holder on the nodes that granted or failed: a caller-chosen
// holder id that already held the lease loses it. A late release of a failed try can race a
// retry of the same holder on a node that answers slowly; the retry's lease then holds one node
// fewer until its next acquire.
func (s *Store) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	start := time.Now()
	quorum := s.Quorum(req.Limit)
	timeout := s.nodeTimeout(req.TTL)
	// Nodes grant max(their last fence + 1, their clock in µs, FenceFloor). A floor of the local
	// clock plus fenceLead makes nodes whose counters are in step (as the last grant's raise left
	// them) grant one fence, so the raise round is rarely needed.
	first := req
	first.FenceFloor = max(req.FenceFloor, uint64(start.UnixMicro())+fenceLead)
	// No node keeps a place for the caller: each node's line is its own, in its own arrival
	// order, so nodes would grant the freed permits to different waiters and none reach a
	// quorum. Redlock waiters retry at their retry interval instead.
	first.Wait = 0
	st := s.newSettle(req, timeout)
	decide := func(rs []result[core.AcquireResult]) bool { return acquireDecided(rs, quorum) }
	res, c := fanout(ctx, s, timeout, nil, func(c context.Context, _ int, n core.Store) (core.AcquireResult, error) { return n.Acquire(c, first) }, decide)
	st.expect(c.then(st.late))
	var granted, failed []int
	answered, refused := 0, 0
	for i, r := range res {
		switch {
		case errors.Is(r.err, core.ErrInvalid):
			st.decide(0, true) // the holder holds other permits: nothing of this call to undo
			return core.AcquireResult{}, r.err
		case r.err == errNoAnswer:
		case r.err != nil:
			failed = append(failed, i)
		case r.v.Granted:
			answered++
			granted = append(granted, i)
		default:
			answered++
			refused++
		}
	}
	if len(granted) >= quorum && ctx.Err() == nil {
		fence, ok := s.raise(ctx, req, res, granted, quorum, timeout)
		if ok && time.Since(start) < req.TTL-s.drift(req.TTL) {
			st.decide(fence, false)
			return core.AcquireResult{Granted: true, Fence: fence}, nil
		}
	}
	// No valid quorum: give back what was granted, each node at its fence, and whatever a node
	// that failed may have granted unseen; stragglers are released as they answer.
	st.decide(0, false)
	rel := map[int]uint64{}
	for _, i := range granted {
		rel[i] = 0
		if res[i].err == nil {
			rel[i] = res[i].v.Fence
		}
	}
	for _, i := range failed {
		rel[i] = 0
	}
	s.releaseOn(ctx, req.Key, req.Holder, rel, timeout)
	if err := ctx.Err(); err != nil {
		return core.AcquireResult{}, err
	}
	if answered < quorum && len(failed) > 0 && refused <= len(s.nodes)-quorum { // failures, not refusals, decided it
		return core.AcquireResult{}, fmt.Errorf("redlock: %d of %d nodes answered, %d needed: %w", answered, len(s.nodes), quorum, nodeErrors(res))
	}
	return core.AcquireResult{RetryAfter: retryAfter(res, quorum)}, nil
}

// acquireDecided reports whether the answers so far settle an acquire: a quorum granted, so
// many refused or failed that a quorum cannot grant, or a node found the request invalid.
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

func acquireGranted(rs []result[core.AcquireResult], quorum int) bool {
	n := 0
	for _, r := range rs {
		if r.err == nil && r.v.Granted {
			n++
		}
	}
	return n >= quorum
}

// fenceLead is how far ahead of the local clock, in µs, a first round asks new grants' fences
// to be: more than the clocks of this process and the nodes are apart.
const fenceLead = uint64(time.Second / time.Microsecond)

// raise brings the granting nodes whose fence is below the highest up to it, and reports the
// fence and whether a quorum now holds the lease at that fence. It records each raised node's
// answer in res: its new fence, or its error (it may have been raised unseen).
func (s *Store) raise(ctx context.Context, req core.AcquireRequest, res []result[core.AcquireResult], granted []int, quorum int, timeout time.Duration) (uint64, bool) {
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
		raised, c := fanout(ctx, s, timeout, low, func(c context.Context, _ int, n core.Store) (core.AcquireResult, error) { return n.Acquire(c, up) }, nil)
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

// releaseOn releases holder's lease on the nodes in fences, each at its fence (0: any), and
// waits for them, with a context that outlives the caller's for at most the node timeout: a
// grant must not be left to expire because the caller gave up.
func (s *Store) releaseOn(ctx context.Context, key, holder string, fences map[int]uint64, timeout time.Duration) {
	if len(fences) == 0 {
		return
	}
	idx := make([]int, 0, len(fences))
	for i := range fences {
		idx = append(idx, i)
	}
	_, c := fanout(context.WithoutCancel(ctx), s, timeout, idx, func(c context.Context, i int, n core.Store) (bool, error) {
		return n.Release(c, core.ReleaseRequest{Key: key, Holder: holder, Fence: fences[i]})
	}, nil)
	c.then(nil)
}

// releaseStray releases, in the background, holder's lease at fence on node i: a node-local
// lease that is not the quorum's (a grant from that node's line, say), which would otherwise
// block that node until it expired. It ends within timeout.
func (s *Store) releaseStray(i int, key, holder string, fence uint64, timeout time.Duration) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		s.nodes[i].Release(ctx, core.ReleaseRequest{Key: key, Holder: holder, Fence: fence})
	}()
}

// settle deals with the answers of an acquire's stragglers once the acquire's outcome is known.
// A later acquire of the same holder on the key supersedes it: that acquire asks every node
// again and settles what it finds, and a release from this one could end its grant (a node
// re-grants the holder idempotently, at the same fence).
type settle struct {
	s       *Store
	id      waiterID
	req     core.AcquireRequest
	timeout time.Duration

	mu         sync.Mutex
	known      bool
	fence      uint64 // the lease's fence; 0 when refused
	keep       bool   // leave every answer be
	superseded bool
	left       int // stragglers' answers to come
	pending    []straggler
}

type straggler struct {
	i int
	r result[core.AcquireResult]
}

// newSettle returns the settle of a new acquire of req, superseding the holder's previous one.
func (s *Store) newSettle(req core.AcquireRequest, timeout time.Duration) *settle {
	st := &settle{s: s, id: waiterID{req.Key, req.Holder}, req: req, timeout: timeout}
	s.mu.Lock()
	if prev := s.settles[st.id]; prev != nil {
		prev.mu.Lock()
		prev.superseded = true
		prev.mu.Unlock()
	}
	s.settles[st.id] = st
	s.mu.Unlock()
	return st
}

// expect counts n more stragglers' answers to come.
func (st *settle) expect(n int) {
	st.mu.Lock()
	st.left += n
	st.mu.Unlock()
}

// late takes a straggler's answer: it acts on it now if the outcome is known, else at decide.
func (st *settle) late(i int, r result[core.AcquireResult]) {
	st.mu.Lock()
	if !st.known {
		st.pending = append(st.pending, straggler{i, r})
		st.mu.Unlock()
		return
	}
	st.mu.Unlock()
	st.act(i, r)
}

// decide records the outcome (fence 0: refused) and settles the stragglers that answered
// before it, each on its own goroutine.
func (st *settle) decide(fence uint64, keep bool) {
	st.mu.Lock()
	st.known, st.fence, st.keep = true, fence, keep
	pending := st.pending
	st.pending = nil
	st.mu.Unlock()
	for _, p := range pending {
		go st.act(p.i, p.r)
	}
	st.done(0)
}

// done counts n answers settled, and forgets the settle when none are left.
func (st *settle) done(n int) {
	st.mu.Lock()
	st.left -= n
	over := st.known && st.left <= 0
	st.mu.Unlock()
	if over {
		st.s.mu.Lock()
		if st.s.settles[st.id] == st {
			delete(st.s.settles, st.id)
		}
		st.s.mu.Unlock()
	}
}

func (st *settle) act(i int, r result[core.AcquireResult]) {
	defer st.done(1)
	st.mu.Lock()
	skip := st.keep || st.superseded
	st.mu.Unlock()
	var fence uint64
	switch {
	case skip || errors.Is(r.err, core.ErrInvalid):
		return
	case r.err == nil && r.v.Granted:
		if st.fence != 0 && r.v.Fence == st.fence {
			return // part of the lease
		}
		fence = r.v.Fence
	case r.err == nil:
		return // refused
	case st.fence != 0:
		return // granted: a node that failed may hold the lease at some fence; Extend settles it
	}
	ctx, cancel := context.WithTimeout(context.Background(), st.timeout)
	defer cancel()
	// A grant at another fence is released, never raised: the lease may have been released
	// meanwhile, and a raise would take it again on this node.
	st.s.nodes[i].Release(ctx, core.ReleaseRequest{Key: st.req.Key, Holder: st.req.Holder, Fence: fence})
}

// Extend implements core.Store.Extend: the lease is kept when a quorum (for the key's limit)
// extends it at one fence with validity left, and Extend reports that fence. A node that holds
// the holder at another fence (a grant from its line, say) does not extend this lease: that
// node-local lease is released, at its fence, in the background. Extend returns as soon as the
// answers decide; stragglers at another fence are released as they answer. When a quorum can
// no longer be had because nodes say the lease is gone (or hold another), it returns an error
// wrapping core.ErrLost; when nodes fail otherwise, their errors joined. Cost: one round trip
// to every node in parallel, the latency of the quorum-th fastest.
func (s *Store) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	start := time.Now()
	timeout := s.nodeTimeout(req.TTL)
	decide := func(rs []result[core.ExtendResult]) bool {
		t := tallyExtend(rs)
		q := s.Quorum(t.limit)
		return t.support >= q || t.support+t.unknown < q
	}
	res, c := fanout(ctx, s, timeout, nil, func(c context.Context, _ int, n core.Store) (core.ExtendResult, error) { return n.Extend(c, req) }, decide)
	t := tallyExtend(res)
	quorum := s.Quorum(t.limit)
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
			s.releaseStray(i, req.Key, req.Holder, r.v.Fence, timeout)
		}
	}
	for i, r := range res {
		if r.err == nil && r.v.Fence == t.fence {
			out.Permits = r.v.Permits
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
// highest limit reported.
type extendTally struct {
	fence   uint64
	support int
	unknown int
	limit   int
}

func tallyExtend(rs []result[core.ExtendResult]) extendTally {
	var t extendTally
	by := map[uint64]int{}
	for _, r := range rs {
		switch {
		case r.err == nil:
			by[r.v.Fence]++
			if n := by[r.v.Fence]; n > t.support || (n == t.support && r.v.Fence < t.fence) {
				t.fence, t.support = r.v.Fence, n
			}
			t.limit = max(t.limit, r.v.Limit)
		case !errors.Is(r.err, core.ErrLost):
			t.unknown++
		}
	}
	return t
}

// Release implements core.Store.Release on every node: each ends the holder's lease with
// req.Fence (the fence a quorum was raised to). It reports whether a majority held the lease,
// and returns as soon as the answers decide that (a majority held it, or too few can have);
// the other nodes' releases finish in the background, within the node timeout (500ms unless
// WithNodeTimeout: Release carries no TTL). When fewer than a majority answer, it returns their
// errors joined. Cost: one round trip to every node in parallel.
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
	res, c := fanout(ctx, s, s.nodeTimeout(0), nil, func(c context.Context, _ int, n core.Store) (bool, error) { return n.Release(c, req) }, decide)
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

// Inspect implements core.Store.Inspect: a lease is reported when a quorum of nodes hold it at
// one fence, with that fence and the TTL for which a quorum still holds it (a node holding the
// holder at another fence does not count). It returns once the answers decide every lease: too
// few nodes are left unanswered to make a quorum for a lease not yet seen, and each lease seen
// is held by a quorum or can no longer be. So a lease held by a bare quorum with one of its
// nodes hung, or a lease some nodes hold but not a quorum, waits for the node timeout (500ms
// unless WithNodeTimeout: Inspect carries no TTL); the TTL reported may then be shorter than
// one from every node. Cost: one round trip to every node in parallel.
func (s *Store) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	res, c := fanout(ctx, s, s.nodeTimeout(0), nil, func(c context.Context, _ int, n core.Store) (core.Snapshot, error) { return n.Inspect(c, key) }, s.inspectDecided)
	c.then(nil)
	if err := ctx.Err(); err != nil {
		return core.Snapshot{}, err
	}
	by, limit, answered := tallyInspect(res)
	if answered < s.quorum {
		return core.Snapshot{}, fmt.Errorf("redlock: %d of %d nodes answered: %w", answered, len(s.nodes), nodeErrors(res))
	}
	snap := core.Snapshot{Limit: limit}
	quorum := s.Quorum(limit)
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

type seen struct {
	info core.LeaseInfo
	ttls []time.Duration
}

type leaseID struct {
	holder string
	fence  uint64
}

func tallyInspect(res []result[core.Snapshot]) (by map[leaseID]*seen, limit, answered int) {
	by = map[leaseID]*seen{}
	for _, r := range res {
		if r.err != nil {
			continue
		}
		answered++
		limit = max(limit, r.v.Limit)
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
	q := s.Quorum(limit)
	if answered < s.quorum || open >= q {
		return false
	}
	for _, e := range by {
		if n := len(e.ttls); n < q && n+open >= q {
			return false
		}
	}
	return true
}

// Package redlock is a quorum Store over N independent stores, after the Redlock description: every
// operation fans out to all nodes in parallel, and a lease is granted only when a quorum grants it
// with validity left (TTL − elapsed − drift > 0). The result is itself a core.Store, so every
// primitive runs on it unchanged:
//
//	store, err := redlock.New([]core.Store{a, b, c})
//	mu, err := primitives.NewMutex(store, "job")
//
// A Store is safe for concurrent use. There is no Close: every background call ends within the node
// timeout, and a release that settles a straggler's grant within one more.
//
// # Guarantees
//
// A Mutex needs a majority of the N nodes (N/2+1) and tolerates ⌊(N−1)/2⌋ nodes down or
// unreachable; an even N is allowed but tolerates no more failures than N−1 would. A semaphore of
// limit L needs more: a lease held on q nodes of N, each node admitting L permits, lets up to
// ⌊N·L/q⌋ permits be held at once, so keeping that ≤ L takes q = ⌊N·L/(L+1)⌋+1 nodes — with 3
// nodes, all 3 for any L ≥ 2; with 5 nodes, 4 for L = 2 or 3. (A semaphore granted on a bare
// majority, as other Redlock semaphores do, can exceed its limit; our conformance stress test
// catches it.) Quorum(limit) tells the number. A lease of every permit needs only a majority: it
// shares a node with any other lease's quorum, and that node cannot hold both.
//
// A key of limit core.MaxLimit is shared-exclusive, as a read-write lock's is: a lease of one
// permit (a reader) or of all of them (a writer) needs a majority, so a writer excludes readers and
// writers with a majority of nodes up. The count of readers is bounded per node, not across them. A
// lease of other sizes on such a key is refused (core.ErrInvalid). QuorumFor tells the number for a
// lease.
//
// Fences strictly increase across successive grants on a key although each node counts on its own.
// Two majorities share a node, and after a quorum grants, the nodes that granted a lower fence are
// raised to the highest, so the shared node carries the order to the next grant. The raise is a
// second round, made only when the fences differ, which is rare: the last raise left the nodes'
// counters in step. A re-acquire by the holder keeps the lease's fence: when a quorum already
// holds the lease at one fence, the nodes that missed the grant and now grant it afresh, above
// that fence, are given back instead. When no node grants afresh and no quorum holds one fence
// (re-acquires of one holder id that overlap, say), the lease moves to the acquire's own floor,
// above any fence an overlapping acquire may be giving back.
//
// Redlock assumes clocks that advance at about the same rate (the drift allowance) and nodes that
// keep their data; a node that restarts empty weakens the majority until its leases would have
// expired (restart it after a TTL, or run it with persistence). Fences are what protect the
// resource when those assumptions fail: pass them on and have the resource reject stale ones.
//
// A lease is the quorum's: Extend and Inspect report a lease at the fence a quorum of nodes holds;
// a node that holds the holder at another fence (a straggler's late grant, or a grant made to the
// same holder id by a client of that node alone) does not count, and Extend releases that
// node-local lease.
//
// # Cost
//
// An operation costs one parallel round of node calls and returns as soon as the answers decide the
// outcome: at the latency of the quorum-th fastest node; a hung node costs nothing while the others
// decide. The other nodes get as long again, at least 2ms, before being left to finish in the
// background, each within the node timeout, which scales with the TTL (see WithNodeTimeout). An
// acquire costs a second round only when its granting nodes disagree on the fence; a refusal costs
// none. Inspect waits for a node whose answer could still change which leases a quorum holds.
//
// # Waiting
//
// Every try goes to the nodes with Wait = 0, so no node keeps a place in its line for a Redlock
// caller: nodes' lines, each in its own arrival order, would grant freed permits to different
// waiters, none of which reached a quorum. A caller that wins leaves no place behind. A Store is
// no core.Notifier: its waiters (in package primitives) watch the key on every node from their
// first refusal (see WatchAcquire) and try again at once when the changes on the nodes that
// refused them could let a quorum grant, sending nothing in between while every node's watch is
// reliable; otherwise they also retry at their retry interval. Strict FIFO is not promised: a
// release wakes every waiter it could serve, and the first whose try reaches a quorum wins.
//
// # Stragglers and stray leases
//
// A node that answers after the outcome is decided is settled in the background: a grant at another
// fence than the lease's (or any grant, after a refusal) is released at the fence it was granted; a
// node that failed after a refusal is released at any fence (it may have granted unseen). Each such
// call ends within the node timeout, and its release within one more. A late release of a failed
// try can race a retry of the same holder on a node that answers slowly; the retry's lease then
// holds one node fewer until its next acquire.
//
// A node that holds the key under another limit than the request's refuses it with an error
// wrapping core.ErrLimitMismatch, and counts as a refusal. When so many nodes do that no quorum can
// grant under the request's limit, the acquire fails with that error and gives back the other
// nodes' grants, each at its fence: a lease the holder already had survives on the nodes that
// refused and ends on those that granted (renewed it). Fewer such nodes hold stray leases, left by
// a failed acquire, which no quorum holds: the other nodes decide, as they would if those nodes
// answered late.
package redlock

import (
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
)

// Store is the quorum Store. Make one with New.
type Store struct {
	nodes  []node
	quorum int
	opts   options

	mu      sync.Mutex
	settles map[keyHolder]*settle // the latest acquire of each holder with stragglers to settle

	wmu   sync.Mutex
	waits map[keyHolder][]*watch // the open WatchAcquire watches of each waiter
}

type keyHolder struct{ key, holder string }

// node is what Redlock needs of each store: the driver contract and the fence floor that keeps
// fences in order across nodes.
type node interface {
	core.Store
	core.FenceRaiser
}

var (
	_ core.Store = (*Store)(nil)
)

// Option configures a Store.
type Option func(*options)

type options struct {
	nodeTimeout time.Duration // used when timeoutSet; else scaled with the TTL
	timeoutSet  bool
	driftFactor float64
	driftMin    time.Duration
}

// WithNodeTimeout bounds each node call: a node slower than that counts as failed for the
// operation. Without it the bound scales with the TTL: TTL/10 for Acquire and Extend, at least
// 50ms and at most 500ms (100ms for a 1s TTL); Release and Inspect, which carry no TTL, wait
// up to 500ms. A call returns as soon as a quorum decides it, so the bound matters only while
// too few nodes answer. Keep it small against the TTL.
func WithNodeTimeout(d time.Duration) Option {
	return func(o *options) { o.nodeTimeout, o.timeoutSet = d, true }
}

// WithDrift sets the clock-drift allowance subtracted from a grant's validity: factor × TTL +
// constant (default 0.01 × TTL + 2ms, as in the Redlock description).
func WithDrift(factor float64, constant time.Duration) Option {
	return func(o *options) { o.driftFactor, o.driftMin = factor, constant }
}

// New returns a quorum Store over stores; it calls no store. Every store must be a core.FenceRaiser
// (as the memory, Redis and PostgreSQL stores are: Redlock orders fences across nodes with it). At
// least one store, none nil or given twice, a positive node timeout and a drift factor in [0, 1)
// are required; otherwise New returns an error wrapping core.ErrInvalid naming the bad argument.
func New(stores []core.Store, opts ...Option) (*Store, error) {
	o := options{driftFactor: 0.01, driftMin: 2 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	fail := func(format string, args ...any) (*Store, error) {
		return nil, fmt.Errorf("redlock: new: %w: %s", core.ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case len(stores) == 0:
		return fail("stores: none given")
	case o.timeoutSet && o.nodeTimeout <= 0:
		return fail("node timeout %v: must be > 0", o.nodeTimeout)
	case o.driftFactor < 0 || o.driftFactor >= 1 || o.driftMin < 0:
		return fail("drift %v × TTL + %v: factor must be in [0, 1), constant >= 0", o.driftFactor, o.driftMin)
	}
	for i, s := range stores {
		if s == nil || (reflect.ValueOf(s).Kind() == reflect.Pointer && reflect.ValueOf(s).IsNil()) {
			return fail("stores[%d]: must not be nil", i)
		}
		for j := range i {
			if reflect.TypeOf(s).Comparable() && reflect.TypeOf(stores[j]) == reflect.TypeOf(s) && stores[j] == s {
				return fail("stores[%d] and stores[%d]: the same store twice", j, i)
			}
		}
	}
	nodes := make([]node, len(stores))
	for i, st := range stores {
		n, ok := st.(node)
		if !ok {
			return fail("stores[%d]: %T does not implement core.FenceRaiser", i, st)
		}
		nodes[i] = n
	}
	return &Store{nodes: nodes, quorum: len(stores)/2 + 1, opts: o, settles: map[keyHolder]*settle{}, waits: map[keyHolder][]*watch{}}, nil
}

// Quorum returns the number of nodes that must hold a lease on a key of limit permits: a
// majority for limit 1, ⌊N·limit/(limit+1)⌋+1 (at least a majority) otherwise, so that no more
// than limit permits can be held at once however the grants fall across nodes.
func (s *Store) Quorum(limit int) int {
	if limit < 1 {
		limit = 1
	}
	return max(s.quorum, len(s.nodes)*limit/(limit+1)+1)
}

// QuorumFor returns the number of nodes that must hold a lease of permits on a key of limit
// permits: a majority for a lease of every permit (two majorities share a node, where the two
// leases would not fit) and for any lease on a key of limit core.MaxLimit (see the package doc);
// Quorum(limit) otherwise.
func (s *Store) QuorumFor(permits, limit int) int {
	if permits >= limit || limit == core.MaxLimit {
		return s.quorum
	}
	return s.Quorum(limit)
}

// Default node timeouts: maxNodeTimeout for calls without a TTL, TTL/10 within
// [minNodeTimeout, maxNodeTimeout] for those with one.
const (
	maxNodeTimeout = 500 * time.Millisecond
	minNodeTimeout = 50 * time.Millisecond
)

// nodeTimeout returns the bound of each node call of an operation with ttl (0: none).
func (s *Store) nodeTimeout(ttl time.Duration) time.Duration {
	switch {
	case s.opts.timeoutSet:
		return s.opts.nodeTimeout
	case ttl <= 0:
		return maxNodeTimeout
	}
	return min(maxNodeTimeout, max(minNodeTimeout, ttl/10))
}

func (s *Store) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*s.opts.driftFactor) + s.opts.driftMin
}

// Package redlock is a quorum Store over N independent stores, after the Redlock description:
// every operation fans out to all nodes in parallel, and a lease is granted only when a majority
// (N/2+1) grants it with validity left (TTL − elapsed − drift > 0). The result is itself a
// core.Store, so every primitive — Mutex, weighted Semaphore — runs on it unchanged:
//
//	store, err := redlock.New([]core.Store{a, b, c})
//	mu, err := primitives.NewMutex(store, "job")
//
// # Guarantees
//
// A Mutex needs a majority of the N nodes (N/2+1) and tolerates ⌊(N−1)/2⌋ nodes down or
// unreachable; an even N is allowed but tolerates no more failures than N−1 would. A semaphore
// of limit L needs more: a lease held on q nodes of N, each node admitting L permits, lets up
// to ⌊N·L/q⌋ permits be held at once, so keeping that ≤ L takes q = ⌊N·L/(L+1)⌋+1 nodes —
// with 3 nodes, all 3 for any L ≥ 2; with 5 nodes, 4 for L = 2 or 3. (A semaphore granted on a
// bare majority, as other Redlock semaphores do, can exceed its limit; our conformance stress
// test catches it.) Quorum(limit) tells the number. Fences strictly increase across successive grants
// on a key although each node counts on its own: two majorities share a node, and after a
// majority grants, the nodes that granted a lower fence are raised to the highest (one more
// round trip, only when they differ), so the shared node carries the order to the next grant.
//
// Redlock assumes clocks that advance at about the same rate (the drift allowance) and nodes
// that keep their data; a node that restarts empty weakens the majority until its leases would
// have expired (restart it after a TTL, or run it with persistence). Fences are what protect
// the resource when those assumptions fail: pass them on and have the resource reject stale ones.
//
// A Store is safe for concurrent use. Its operations cost one parallel round of store calls
// (latency of the slowest node in the quorum, bounded by the node timeout), plus a second round
// on an acquire whose granting nodes disagree on the fence.
package redlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
)

// Store is the quorum Store. Make one with New.
type Store struct {
	nodes  []core.Store
	quorum int
	opts   options
}

var (
	_ core.Store    = (*Store)(nil)
	_ core.Notifier = (*Store)(nil)
)

// Option configures a Store.
type Option func(*options)

type options struct {
	nodeTimeout time.Duration
	driftFactor float64
	driftMin    time.Duration
}

// WithNodeTimeout bounds each node call (default 500ms): a node slower than that counts as
// failed for the operation. Keep it small against the TTL.
func WithNodeTimeout(d time.Duration) Option {
	return func(o *options) { o.nodeTimeout = d }
}

// WithDrift sets the clock-drift allowance subtracted from a grant's validity: factor × TTL +
// constant (default 0.01 × TTL + 2ms, as in the Redlock description).
func WithDrift(factor float64, constant time.Duration) Option {
	return func(o *options) { o.driftFactor, o.driftMin = factor, constant }
}

// New returns a quorum Store over stores. It checks its arguments — at least one store, none
// nil, none twice, a positive node timeout, a drift factor in [0, 1) — and returns an error
// wrapping core.ErrInvalid naming the bad one; it calls no store.
func New(stores []core.Store, opts ...Option) (*Store, error) {
	o := options{nodeTimeout: 500 * time.Millisecond, driftFactor: 0.01, driftMin: 2 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	fail := func(format string, args ...any) (*Store, error) {
		return nil, fmt.Errorf("leasehold/redlock: new: %w: %s", core.ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case len(stores) == 0:
		return fail("stores: none given")
	case o.nodeTimeout <= 0:
		return fail("node timeout %v: must be > 0", o.nodeTimeout)
	case o.driftFactor < 0 || o.driftFactor >= 1 || o.driftMin < 0:
		return fail("drift %v × TTL + %v: factor must be in [0, 1), constant >= 0", o.driftFactor, o.driftMin)
	}
	for i, s := range stores {
		if s == nil || (reflect.ValueOf(s).Kind() == reflect.Pointer && reflect.ValueOf(s).IsNil()) {
			return fail("stores[%d]: nil", i)
		}
		for j := range i {
			if reflect.TypeOf(s).Comparable() && reflect.TypeOf(stores[j]) == reflect.TypeOf(s) && stores[j] == s {
				return fail("stores[%d] and stores[%d]: the same store twice", j, i)
			}
		}
	}
	return &Store{nodes: slices.Clone(stores), quorum: len(stores)/2 + 1, opts: o}, nil
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

func (s *Store) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*s.opts.driftFactor) + s.opts.driftMin
}

type result[T any] struct {
	v   T
	err error
}

// fanout calls f on the nodes in idx (all nodes when idx is nil) in parallel, each bounded by
// the node timeout, and returns every result, indexed like s.nodes.
func fanout[T any](ctx context.Context, s *Store, idx []int, f func(context.Context, core.Store) (T, error)) []result[T] {
	if idx == nil {
		idx = make([]int, len(s.nodes))
		for i := range idx {
			idx[i] = i
		}
	}
	res := make([]result[T], len(s.nodes))
	var wg sync.WaitGroup
	for _, i := range idx {
		wg.Go(func() {
			c, cancel := context.WithTimeout(ctx, s.opts.nodeTimeout)
			defer cancel()
			v, err := f(c, s.nodes[i])
			res[i] = result[T]{v, err}
		})
	}
	wg.Wait()
	return res
}

func nodeErrors[T any](res []result[T]) error {
	var errs []error
	for i, r := range res {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i, r.err))
		}
	}
	return errors.Join(errs...)
}

func wrap(op, key string, err error) error {
	return fmt.Errorf("leasehold/redlock: %s %q: %w", op, key, err)
}

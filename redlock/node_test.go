package redlock_test

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/redlock"
)

var errDown = errors.New("node down")

// node is a memory store that can be taken down, slowed, or wiped (a restart without
// persistence), to inject faults into one Redlock node.
type node struct {
	clock core.Clock

	mu    sync.Mutex
	inner *memory.Store
	down  bool
	delay time.Duration
}

func newNode(clock core.Clock) *node {
	return &node{clock: clock, inner: memory.New(memory.WithClock(clock))}
}

func (n *node) set(down bool, delay time.Duration) {
	n.mu.Lock()
	n.down, n.delay = down, delay
	n.mu.Unlock()
}

// wipe replaces the node's data with nothing, as a restart without persistence would.
func (n *node) wipe() {
	n.mu.Lock()
	n.inner = memory.New(memory.WithClock(n.clock))
	n.mu.Unlock()
}

func (n *node) get(ctx context.Context) (*memory.Store, error) {
	n.mu.Lock()
	inner, down, delay := n.inner, n.down, n.delay
	n.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if down {
		return nil, errDown
	}
	return inner, nil
}

func (n *node) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	s, err := n.get(ctx)
	if err != nil {
		return core.AcquireResult{}, err
	}
	return s.Acquire(ctx, req)
}

func (n *node) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	s, err := n.get(ctx)
	if err != nil {
		return core.AcquireResult{}, err
	}
	return s.AcquireAbove(ctx, req, floor)
}

func (n *node) RaiseFence(ctx context.Context, req core.AcquireRequest, fence uint64) (core.AcquireResult, error) {
	s, err := n.get(ctx)
	if err != nil {
		return core.AcquireResult{}, err
	}
	return s.RaiseFence(ctx, req, fence)
}

func (n *node) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	s, err := n.get(ctx)
	if err != nil {
		return core.ExtendResult{}, err
	}
	return s.Extend(ctx, req)
}

func (n *node) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	s, err := n.get(ctx)
	if err != nil {
		return false, err
	}
	return s.Release(ctx, req)
}

func (n *node) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	s, err := n.get(ctx)
	if err != nil {
		return core.Snapshot{}, err
	}
	return s.Inspect(ctx, key)
}

func (n *node) Register(ctx context.Context, req core.AcquireRequest) (core.Wake, error) {
	n.mu.Lock()
	inner := n.inner
	n.mu.Unlock()
	return inner.Register(ctx, req)
}

func nodes(clock core.Clock, n int) ([]*node, []core.Store) {
	var ns []*node
	var ss []core.Store
	for range n {
		nd := newNode(clock)
		ns = append(ns, nd)
		ss = append(ss, nd)
	}
	return ns, ss
}

func mustNew(t interface {
	Helper()
	Fatal(...any)
}, stores []core.Store, opts ...redlock.Option) *redlock.Store {
	t.Helper()
	s, err := redlock.New(stores, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Watch forwards to the node's store, unless the node is down.
func (n *node) Watch(ctx context.Context, key string) (core.Wake, error) {
	n.mu.Lock()
	inner, down := n.inner, n.down
	n.mu.Unlock()
	if down {
		return nil, errDown
	}
	return inner.Watch(ctx, key)
}

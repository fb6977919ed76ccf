package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

func memoryNodes(n int) []core.Store {
	var ss []core.Store
	for range n {
		ss = append(ss, memory.New())
	}
	return ss
}

// A waiter over Redlock whose holder's lease expires (no release, so nothing announced) is
// granted once it expires, by the RetryAfter of the nodes, not at its hour-long retry interval.
func TestRedlockWaiterIsGrantedWhenTheHolderExpires(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	nodes := memoryNodes(3)
	held := core.AcquireRequest{Key: "job", Holder: "expiring", Permits: 1, Limit: 1, TTL: 300 * time.Millisecond}
	for _, n := range nodes {
		if res, err := n.Acquire(ctx, held); err != nil || !res.Granted {
			t.Fatalf("holder on a node: %+v, %v", res, err)
		}
	}
	mu, err := primitives.NewMutex(mustNew(t, nodes), "job", primitives.WithRetryInterval(time.Hour),
		primitives.WithTTL(time.Hour), primitives.WithAcquireTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if g := <-startWaiter(ctx, mu); g.err != nil {
		t.Fatal(g.err)
	}
}

// Waiters on a Redlock semaphore of limit 3 over 5 nodes (4 must grant), with an hour-long retry
// interval, are each granted as the holders release one at a time: a partial release wakes them.
func TestRedlockSemaphoreWaitersAreGrantedAsHoldersReleaseOneByOne(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var nodes []*faultyNode
	var stores []core.Store
	for range 5 {
		n := &faultyNode{Store: memory.New()}
		nodes, stores = append(nodes, n), append(stores, n)
	}
	s := mustNew(t, stores)
	sem := func() *primitives.Semaphore {
		sm, err := primitives.NewSemaphore(s, "pool", 3, primitives.WithRetryInterval(time.Hour),
			primitives.WithTTL(time.Hour), primitives.WithAcquireTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return sm
	}
	var held []primitives.Lease
	for range 3 {
		l, err := sem().Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	type out struct {
		l   primitives.Lease
		err error
	}
	got := make(chan out, 3)
	for range 3 {
		go func() {
			l, err := sem().Acquire(ctx, 1)
			got <- out{l, err}
		}()
	}
	// Each waiter made its first try and its try after watching (the holders one try each).
	poll.Until(t, "the waiters to wait", func() bool { return nodes[0].tries.Load() >= 3+3*2 })
	for _, h := range held {
		select {
		case o := <-got:
			t.Fatalf("a waiter returned while the semaphore was full: %v", o.err)
		default:
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		o := <-got
		if o.err != nil {
			t.Fatal(o.err)
		}
		defer o.l.Release(context.WithoutCancel(ctx))
	}
}

// A Redlock waiter whose ctx ends while it waits returns the ctx's error and leaves no goroutine
// behind (goleak, in TestMain), and the key is free for the next caller at once.
func TestRedlockWaiterCanceledWhileWaitingLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := mustNew(t, memoryNodes(3))
	mu, err := primitives.NewMutex(s, "job", primitives.WithRetryInterval(time.Hour), primitives.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	held, err := mu.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		wctx, cancel := context.WithCancel(ctx)
		got := startWaiter(wctx, mu)
		time.AfterFunc(time.Duration(i)*20*time.Millisecond, cancel)
		if g := <-got; !errors.Is(g.err, context.Canceled) {
			t.Fatalf("waiter %d: %v, want context.Canceled", i, g.err)
		}
		cancel()
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := mu.TryAcquire(ctx)
	if err != nil {
		t.Fatal(fmt.Errorf("after the canceled waiters: %w", err))
	}
	l.Release(ctx)
}

// Two Redlock waiters under one holder id (WithHolder) share each other's tries' results: each
// refused try of one resets what the other's watch counts. Neither is stranded: on the
// release both are granted (the one lease, granted again to its holder), with an hour-long
// retry interval.
func TestRedlockWaitersSharingAHolderAreBothGrantedOnRelease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var nodes []*faultyNode
	var stores []core.Store
	for range 3 {
		n := &faultyNode{Store: memory.New()}
		nodes, stores = append(nodes, n), append(stores, n)
	}
	s := mustNew(t, stores)
	held, err := waiterMutex(t, s, "job").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shared := func() *primitives.Mutex {
		mu, err := primitives.NewMutex(s, "job", primitives.WithHolder("shared"), primitives.WithRetryInterval(time.Hour),
			primitives.WithTTL(time.Hour), primitives.WithAcquireTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return mu
	}
	type out struct {
		l   primitives.Lease
		err error
	}
	got := make(chan out, 2)
	for i := range 2 {
		go func() {
			l, err := shared().Acquire(ctx)
			got <- out{l, err}
		}()
		poll.Until(t, "the waiter to wait", func() bool { return nodes[0].tries.Load() >= int64(1+2*(i+1)) })
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		o := <-got
		if o.err != nil {
			t.Fatal(o.err)
		}
		defer o.l.Release(context.WithoutCancel(ctx))
	}
}

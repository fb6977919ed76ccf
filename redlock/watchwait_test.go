package redlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// countAcquires counts the acquires that reach a node (Redlock sends AcquireAbove).
type countAcquires struct {
	*node
	n atomic.Int64
}

func (c *countAcquires) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	c.n.Add(1)
	return c.node.AcquireAbove(ctx, req, floor)
}

// A waiter over Redlock whose nodes announce changes watches the key from its first refusal: it
// is woken by the release, not by the holder's expiry (an hour here), and sends nothing while it
// waits.
func TestRedlockWaiterWakesOnRelease(t *testing.T) {
	ns, _ := nodes(core.SystemClock{}, 3)
	counted := make([]core.Store, len(ns))
	cs := make([]*countAcquires, len(ns))
	for i, n := range ns {
		cs[i] = &countAcquires{node: n}
		counted[i] = cs[i]
	}
	s := mustNew(t, counted)
	mu, err := primitives.NewMutex(s, "job", primitives.WithRetryInterval(10*time.Millisecond), primitives.WithTTL(time.Hour), primitives.WithAcquireTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	held, err := mu.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := mu.Acquire(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	// Wait until the waiter has made its refused try and its try after watching, then make sure
	// it sends nothing more while the lock is held. Node 0 sees three: the holder's, the
	// waiter's refused try and its try after watching.
	poll.For(t, "node 0 to see 3 acquires", func() (int64, bool) { n := cs[0].n.Load(); return n, n >= 3 })
	before := cs[0].n.Load()
	select {
	case err := <-got:
		t.Fatalf("the waiter returned while the lock was held: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if after := cs[0].n.Load(); after != before {
		t.Errorf("the waiter sent %d acquires to a node while it waited; want none", after-before)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release (its retry interval is an hour)")
	}
}

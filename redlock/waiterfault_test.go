package redlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/redlock"
)

// faultyNode is a memory node that counts the acquires it is sent and, while failing is set,
// answers them with an error (its watch goes on working, as a Redis node's subscription may
// while its scripts fail).
type faultyNode struct {
	*memory.Store
	tries   atomic.Int64
	failing atomic.Bool
}

var errNodeFault = errors.New("node fault")

func (f *faultyNode) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	f.tries.Add(1)
	if f.failing.Load() {
		return core.AcquireResult{}, errNodeFault
	}
	return f.Store.Acquire(ctx, req)
}

func (f *faultyNode) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	f.tries.Add(1)
	if f.failing.Load() {
		return core.AcquireResult{}, errNodeFault
	}
	return f.Store.AcquireAbove(ctx, req, floor)
}

// A waiter over three nodes that is granted on one, refused on one and answered with an error by
// the third does not try again until something changes on the node that refused it: its own try
// cannot have made room, so it waits idle (rather than trying in a loop while the lock is held),
// and is granted once the holder releases there.
func TestRedlockWaiterWithAFailingNodeWaitsIdle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	nodes := []*faultyNode{{Store: memory.New()}, {Store: memory.New()}, {Store: memory.New()}}
	stores := []core.Store{nodes[0], nodes[1], nodes[2]}
	ws := mustNew(t, stores)
	held := core.AcquireRequest{Key: "job", Holder: "holder-on-two", Permits: 1, Limit: 1, TTL: time.Hour}
	for _, n := range nodes[1:] {
		if res, err := n.Store.Acquire(ctx, held); err != nil || !res.Granted {
			t.Fatalf("holder on a node: %+v, %v", res, err)
		}
	}
	nodes[2].failing.Store(true)
	got := startWaiter(ctx, waiterMutex(t, ws, "job"))
	poll.Until(t, "the waiter's first try and its try after watching", func() bool {
		return nodes[0].tries.Load() >= 2
	})
	before := nodes[0].tries.Load()
	select {
	case g := <-got:
		t.Fatalf("the waiter returned while the lock was held: %v", g.err)
	case <-time.After(300 * time.Millisecond):
	}
	if n := nodes[0].tries.Load() - before; n > 1 {
		t.Errorf("the waiter tried %d more times while nothing changed; want at most one", n)
	}
	if _, err := nodes[1].Release(ctx, core.ReleaseRequest{Key: "job", Holder: held.Holder}); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-got:
		if g.err != nil {
			t.Fatal(g.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the waiter was not granted a minute after the release on the node that refused it")
	}
}

// A waiter refused while a node answered with an error is granted, within its retry interval,
// once that node answers again with room: its recovery is announced by no change, so the
// waiter must not wait for the holder's lease to expire (the RetryAfter of the nodes that did
// answer).
func TestRedlockWaiterIsGrantedWhenAFailingNodeRecovers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	nodes := []*faultyNode{{Store: memory.New()}, {Store: memory.New()}, {Store: memory.New()}}
	stores := []core.Store{nodes[0], nodes[1], nodes[2]}
	ws := mustNew(t, stores)
	held := core.AcquireRequest{Key: "job", Holder: "holder-on-one", Permits: 1, Limit: 1, TTL: time.Hour}
	if res, err := nodes[1].Store.Acquire(ctx, held); err != nil || !res.Granted {
		t.Fatalf("holder on a node: %+v, %v", res, err)
	}
	nodes[0].failing.Store(true)
	mu, err := primitives.NewMutex(ws, "job", primitives.WithRetryInterval(200*time.Millisecond),
		primitives.WithTTL(time.Hour), primitives.WithAcquireTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := startWaiter(ctx, mu)
	poll.Until(t, "the waiter's tries after watching", func() bool { return nodes[2].tries.Load() >= 3 })
	nodes[0].failing.Store(false)
	select {
	case g := <-got:
		if g.err != nil {
			t.Fatal(g.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the waiter was not granted a minute after the failing node recovered with room")
	}
}

// hookNode is a memory node that runs after, once, after its n-th acquire has its answer and
// before the caller gets it.
type hookNode struct {
	*memory.Store
	tries atomic.Int64
	n     int64
	after func()
}

func (h *hookNode) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	res, err := h.Store.AcquireAbove(ctx, req, floor)
	if h.tries.Add(1) == h.n {
		h.after()
	}
	return res, err
}

// A release that comes while the waiter's try is under way, on a node that has already refused
// it, wakes the waiter: the try's answer is already stale, and the release's change counts.
func TestRedlockWaiterIsWokenByAReleaseDuringItsRefusedTry(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	held := core.AcquireRequest{Key: "job", Holder: "holder-on-two", Permits: 1, Limit: 1, TTL: time.Hour}
	n1 := &hookNode{Store: memory.New(), n: 2} // the waiter's try after watching
	n1.after = func() {
		if _, err := n1.Store.Release(context.WithoutCancel(ctx), core.ReleaseRequest{Key: "job", Holder: held.Holder}); err != nil {
			t.Error(err)
		}
	}
	stores := []core.Store{memory.New(), n1, memory.New()}
	for _, n := range stores[1:] {
		if res, err := n.Acquire(ctx, held); err != nil || !res.Granted {
			t.Fatalf("holder on a node: %+v, %v", res, err)
		}
	}
	mu, err := primitives.NewMutex(mustNew(t, stores), "job", primitives.WithRetryInterval(time.Hour),
		primitives.WithTTL(time.Hour), primitives.WithAcquireTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if g := <-startWaiter(ctx, mu); g.err != nil {
		t.Fatal(g.err)
	}
	if n := n1.tries.Load(); n < 3 {
		t.Errorf("node 1 answered %d tries; want the release to come during the second", n)
	}
}

// slowNode is a memory node that answers acquires after a delay.
type slowNode struct {
	*memory.Store
	tries atomic.Int64
	delay time.Duration
}

func (s *slowNode) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	s.tries.Add(1)
	time.Sleep(s.delay)
	return s.Store.AcquireAbove(ctx, req, floor)
}

// A waiter refused by a quorum of nodes before the slowest answers stays idle with a short retry
// interval: the slow node was not waited for, not failed, so the watch stays reliable.
func TestRedlockWaiterRefusedBeforeASlowNodeAnswersWaitsIdle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	held := core.AcquireRequest{Key: "job", Holder: "holder-on-two", Permits: 1, Limit: 1, TTL: time.Hour}
	fast := []*faultyNode{{Store: memory.New()}, {Store: memory.New()}}
	slow := &slowNode{Store: memory.New(), delay: 100 * time.Millisecond}
	stores := []core.Store{fast[0], fast[1], slow}
	for _, n := range fast {
		if res, err := n.Store.Acquire(ctx, held); err != nil || !res.Granted {
			t.Fatalf("holder on a node: %+v, %v", res, err)
		}
	}
	mu, err := primitives.NewMutex(mustNew(t, stores), "job", primitives.WithRetryInterval(50*time.Millisecond),
		primitives.WithTTL(time.Hour), primitives.WithAcquireTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := startWaiter(ctx, mu)
	poll.Until(t, "the waiter's try after watching", func() bool { return fast[0].tries.Load() >= 2 })
	before := fast[0].tries.Load()
	select {
	case g := <-got:
		t.Fatalf("the waiter returned while the lock was held: %v", g.err)
	case <-time.After(500 * time.Millisecond):
	}
	if n := fast[0].tries.Load() - before; n > 1 {
		t.Errorf("the waiter tried %d more times while nothing changed; want at most one", n)
	}
	if _, err := fast[1].Release(ctx, core.ReleaseRequest{Key: "job", Holder: held.Holder}); err != nil {
		t.Fatal(err)
	}
	mustBeGranted(t, got)
}

// A waiter granted on one node, refused on one and left unanswered by a hung third (past the
// node timeout) waits idle until the node that refused it changes: its own try cannot make
// room, so it does not try again at once, every node timeout, while the lock is held.
func TestRedlockWaiterWithAHungNodeWaitsIdle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	held := core.AcquireRequest{Key: "job", Holder: "holder-on-two", Permits: 1, Limit: 1, TTL: time.Hour}
	fast := []*faultyNode{{Store: memory.New()}, {Store: memory.New()}}
	hung := &slowNode{Store: memory.New(), delay: 200 * time.Millisecond}
	stores := []core.Store{fast[0], fast[1], hung}
	for _, n := range []core.Store{fast[1].Store, hung.Store} {
		if res, err := n.Acquire(ctx, held); err != nil || !res.Granted {
			t.Fatalf("holder on a node: %+v, %v", res, err)
		}
	}
	mu, err := primitives.NewMutex(mustNew(t, stores, redlock.WithNodeTimeout(20*time.Millisecond)), "job",
		primitives.WithRetryInterval(time.Hour), primitives.WithTTL(time.Hour), primitives.WithAcquireTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := startWaiter(ctx, mu)
	poll.Until(t, "the waiter's try after watching", func() bool { return fast[0].tries.Load() >= 2 })
	before := fast[0].tries.Load()
	select {
	case g := <-got:
		t.Fatalf("the waiter returned while the lock was held: %v", g.err)
	case <-time.After(time.Second):
	}
	if n := fast[0].tries.Load() - before; n > 1 {
		t.Errorf("the waiter tried %d more times while nothing changed; want at most one", n)
	}
	if _, err := fast[1].Release(ctx, core.ReleaseRequest{Key: "job", Holder: held.Holder}); err != nil {
		t.Fatal(err)
	}
	mustBeGranted(t, got)
}

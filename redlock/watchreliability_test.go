package redlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// lossyNode is a memory node whose watches can lose their subscription: while lost, they are
// not reliable and announce nothing; losing it and getting it back are announced, as on Redis.
type lossyNode struct {
	*memory.Store
	tries   atomic.Int64
	mu      sync.Mutex
	lost    bool
	watches []*lossyWatch
}

type lossyWatch struct {
	n     *lossyNode
	inner core.Wake
	c     chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

func (n *lossyNode) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	n.tries.Add(1)
	return n.Store.AcquireAbove(ctx, req, floor)
}

func (n *lossyNode) Watch(ctx context.Context, key string) (core.Wake, error) {
	inner, err := n.Store.Watch(ctx, key)
	if err != nil {
		return nil, err
	}
	w := &lossyWatch{n: n, inner: inner, c: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	n.mu.Lock()
	n.watches = append(n.watches, w)
	n.mu.Unlock()
	go func() {
		defer close(w.done)
		for {
			select {
			case <-inner.C():
				if w.Reliable() {
					w.wake()
				}
			case <-w.stop:
				return
			}
		}
	}()
	return w, nil
}

// setLost loses or gets back the subscriptions, announcing it on every watch.
func (n *lossyNode) setLost(lost bool) {
	n.mu.Lock()
	n.lost = lost
	ws := append([]*lossyWatch(nil), n.watches...)
	n.mu.Unlock()
	for _, w := range ws {
		w.wake()
	}
}

func (w *lossyWatch) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

func (w *lossyWatch) C() <-chan struct{} { return w.c }

func (w *lossyWatch) Reliable() bool {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	return !w.n.lost
}

func (w *lossyWatch) Close() {
	w.once.Do(func() {
		close(w.stop)
		<-w.done
		w.inner.Close()
	})
}

// A Redlock waiter whose watch of a node loses its subscription, misses the holder's release
// there, and gets the subscription back, is granted on getting it back: not at its hour-long
// retry interval, although nothing announced the release.
func TestRedlockWaiterIsGrantedWhenALostWatchComesBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	nodes := []*lossyNode{{Store: memory.New()}, {Store: memory.New()}, {Store: memory.New()}}
	stores := []core.Store{nodes[0], nodes[1], nodes[2]}
	held := core.AcquireRequest{Key: "job", Holder: "holder-on-two", Permits: 1, Limit: 1, TTL: time.Hour}
	for _, n := range nodes[1:] {
		if res, err := n.Store.Acquire(ctx, held); err != nil || !res.Granted {
			t.Fatalf("holder on a node: %+v, %v", res, err)
		}
	}
	mu, err := primitives.NewMutex(mustNew(t, stores), "job", primitives.WithRetryInterval(time.Hour),
		primitives.WithTTL(time.Hour), primitives.WithAcquireTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := startWaiter(ctx, mu)
	poll.Until(t, "the waiter's try after watching", func() bool { return nodes[1].tries.Load() >= 2 })
	nodes[1].setLost(true)
	// The loss is announced: the waiter looks again (and is refused).
	poll.Until(t, "the waiter's try on the loss", func() bool { return nodes[1].tries.Load() >= 3 })
	if _, err := nodes[1].Store.Release(ctx, core.ReleaseRequest{Key: "job", Holder: held.Holder}); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-got:
		t.Fatalf("the waiter returned before it could know of the release: %v", g.err)
	default:
	}
	nodes[1].setLost(false)
	mustBeGranted(t, got)
}

package redlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/redlock"
)

// A fan-out round and the caller's ctx: a ctx that ends before the round is decided cancels every
// node's call; one that ends after leaves the stragglers to finish. Run in synctest bubbles over
// scripted nodes.

// TestCtxEndingAfterDecisionDoesNotCancelStragglers: a Release decided by nodes 0 and
// 1 is waiting its grace for node 2 when the caller's ctx ends. The round was decided: node 2's
// call must go on (Store's doc: "the other nodes' releases finish in the background"), and end
// at its deadline, not be canceled by the caller's ctx.
func TestCtxEndingAfterDecisionDoesNotCancelStragglers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		log := &callLog{}
		_, ss := scriptedNodes(3, hangOn(log, 2), nil)
		s := mustNew(t, ss, redlock.WithNodeTimeout(timeout))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"})
			done <- err
		}()
		synctest.Wait() // nodes 0 and 1 answered (decided); Release waits its grace for node 2
		if c := log.get(0, "release"); len(c) != 1 || !c[0].ended {
			t.Fatalf("node 0 did not answer: %+v", c)
		}
		select {
		case err := <-done:
			t.Fatalf("Release returned before its grace: %v", err)
		default:
		}
		cancel()
		synctest.Wait()
		<-done
		c := log.get(2, "release")
		if len(c) != 1 {
			t.Fatalf("node 2: %d release calls", len(c))
		}
		if c[0].ended {
			t.Errorf("node 2's release, a straggler of a decided round, was canceled by the caller's ctx (%v after %v); want it to go on until its deadline", c[0].err, c[0].end.Sub(c[0].begin))
		}
		time.Sleep(timeout)
		synctest.Wait()
		if c := log.get(2, "release"); !c[0].ended || c[0].end.Sub(c[0].begin) != timeout {
			t.Errorf("node 2's release: ended %v after %v; want at its deadline", c[0].ended, c[0].end.Sub(c[0].begin))
		}
	})
}

// gatedCtx is a context whose end is told to AfterFunc callbacks only when fire is called, as a
// context whose own AfterFunc runs them on a goroutine of its own may do, some time after Done
// is closed: context.AfterFunc uses a context's AfterFunc method when it has one.
type gatedCtx struct {
	context.Context // for Deadline and Value
	done            chan struct{}

	mu    sync.Mutex
	funcs map[int]func()
	next  int
}

func newGatedCtx() *gatedCtx {
	return &gatedCtx{Context: context.Background(), done: make(chan struct{}), funcs: map[int]func(){}}
}

func (g *gatedCtx) Done() <-chan struct{} { return g.done }

func (g *gatedCtx) Err() error {
	select {
	case <-g.done:
		return context.Canceled
	default:
		return nil
	}
}

func (g *gatedCtx) AfterFunc(f func()) func() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	id := g.next
	g.next++
	g.funcs[id] = f
	return func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		_, ok := g.funcs[id]
		delete(g.funcs, id)
		return ok
	}
}

func (g *gatedCtx) cancel() { close(g.done) }

// fire runs the callbacks still registered, each on its own goroutine.
func (g *gatedCtx) fire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, f := range g.funcs {
		delete(g.funcs, id)
		go f()
	}
}

// TestCtxEndingBeforeDecisionCancelsEveryCall: every node hangs; the caller's ctx ends
// and Release returns its error. Every node's call must then be canceled, whenever the ctx's
// AfterFunc callbacks run: fanout must not rely on its AfterFunc having run before it stops it
// (with a context.WithCancel ctx too, Done is closed before the AfterFunc is started, so fanout
// can stop it first).
func TestCtxEndingBeforeDecisionCancelsEveryCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		log := &callLog{}
		_, ss := scriptedNodes(3, hangOn(log, 0, 1, 2), nil)
		s := mustNew(t, ss, redlock.WithNodeTimeout(timeout))
		ctx := newGatedCtx()
		done := make(chan error, 1)
		go func() {
			_, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"})
			done <- err
		}()
		synctest.Wait()
		begin := time.Now()
		ctx.cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Release after ctx ended: %v, want Canceled", err)
		}
		ctx.fire()
		synctest.Wait()
		for i := range 3 {
			c := log.get(i, "release")
			if len(c) != 1 || !c[0].ended || c[0].end != begin || !errors.Is(c[0].err, context.Canceled) {
				t.Errorf("node %d's release after the caller's ctx ended before the decision: %+v; want canceled at once", i, c)
			}
		}
		time.Sleep(timeout) // let calls left running reach their deadline
	})
}

// TestCtxEndedFirstCallsNoNode: with ctx ended before the call, no node is asked and
// each operation returns ctx's error.
func TestCtxEndedFirstCallsNoNode(t *testing.T) {
	log := &callLog{}
	_, ss := scriptedNodes(3, hangOn(log), nil)
	s := mustNew(t, ss)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	if _, err := s.Acquire(ctx, req); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire: %v", err)
	}
	if _, err := s.Extend(ctx, core.ExtendRequest{Key: "k", Holder: "a", TTL: time.Minute}); !errors.Is(err, context.Canceled) {
		t.Errorf("Extend: %v", err)
	}
	if _, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Release: %v", err)
	}
	if _, err := s.Inspect(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Inspect: %v", err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.calls) != 0 {
		t.Errorf("%d node calls with ctx ended, want none", len(log.calls))
	}
}

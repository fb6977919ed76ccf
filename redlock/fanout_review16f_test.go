package redlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/redlock"
)

// Review 16f: a fan-out round's calls share one deadline and one context (685311a). These tests
// run in synctest bubbles: node delays are fake time, and synctest.Wait is the synchronisation.

// scripted is a memory store whose calls run before (which may block, fail or record the call's
// context) and, once the store answered, after (which may hold the answer back, ignoring ctx,
// as a network would). Both are set before the first call.
type scripted struct {
	*memory.Store
	i      int
	before func(ctx context.Context, i int, op string) error
	after  func(ctx context.Context, i int, op string)
}

func (s *scripted) pre(ctx context.Context, op string) error {
	if s.before == nil {
		return nil
	}
	return s.before(ctx, s.i, op)
}

func (s *scripted) post(ctx context.Context, op string) {
	if s.after != nil {
		s.after(ctx, s.i, op)
	}
}

func (s *scripted) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	if err := s.pre(ctx, "acquire"); err != nil {
		return core.AcquireResult{}, err
	}
	defer s.post(ctx, "acquire")
	return s.Store.Acquire(ctx, req)
}

func (s *scripted) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	if err := s.pre(ctx, "acquire"); err != nil {
		return core.AcquireResult{}, err
	}
	defer s.post(ctx, "acquire")
	return s.Store.AcquireAbove(ctx, req, floor)
}

func (s *scripted) RaiseFence(ctx context.Context, req core.AcquireRequest, fence uint64) (core.AcquireResult, error) {
	if err := s.pre(ctx, "raise"); err != nil {
		return core.AcquireResult{}, err
	}
	defer s.post(ctx, "raise")
	return s.Store.RaiseFence(ctx, req, fence)
}

func (s *scripted) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	if err := s.pre(ctx, "extend"); err != nil {
		return core.ExtendResult{}, err
	}
	defer s.post(ctx, "extend")
	return s.Store.Extend(ctx, req)
}

func (s *scripted) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	if err := s.pre(ctx, "release"); err != nil {
		return false, err
	}
	defer s.post(ctx, "release")
	return s.Store.Release(ctx, req)
}

func (s *scripted) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	if err := s.pre(ctx, "inspect"); err != nil {
		return core.Snapshot{}, err
	}
	defer s.post(ctx, "inspect")
	return s.Store.Inspect(ctx, key)
}

// scriptedNodes returns n scripted memory stores sharing before and after.
func scriptedNodes(n int, before func(ctx context.Context, i int, op string) error, after func(ctx context.Context, i int, op string)) ([]*scripted, []core.Store) {
	var ns []*scripted
	var ss []core.Store
	for i := range n {
		nd := &scripted{Store: memory.New(), i: i, before: before, after: after}
		ns, ss = append(ns, nd), append(ss, nd)
	}
	return ns, ss
}

// callLog records the calls nodes received: op, context, and how each ended.
type callLog struct {
	mu    sync.Mutex
	calls []*loggedCall
}

type loggedCall struct {
	i     int
	op    string
	ctx   context.Context
	begin time.Time
	end   time.Time
	err   error // the hung call's ctx.Err when it ended
	ended bool
}

func (l *callLog) add(ctx context.Context, i int, op string) *loggedCall {
	c := &loggedCall{i: i, op: op, ctx: ctx, begin: time.Now()}
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
	return c
}

func (l *callLog) finish(c *loggedCall, err error) {
	l.mu.Lock()
	c.end, c.err, c.ended = time.Now(), err, true
	l.mu.Unlock()
}

func (l *callLog) get(i int, op string) []loggedCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []loggedCall
	for _, c := range l.calls {
		if c.i == i && c.op == op {
			out = append(out, *c)
		}
	}
	return out
}

// hangOn returns a before hook under which the nodes in hung block every op until the call's
// context ends, logging each call; the others answer at once.
func hangOn(log *callLog, hung ...int) func(ctx context.Context, i int, op string) error {
	return func(ctx context.Context, i int, op string) error {
		c := log.add(ctx, i, op)
		for _, h := range hung {
			if h == i {
				<-ctx.Done()
				log.finish(c, ctx.Err())
				return ctx.Err()
			}
		}
		log.finish(c, nil)
		return nil
	}
}

// TestHungNodeCutOffAtNodeTimeoutAndQuorumReturnsAtOnce_review16f: with node 2 of three hung,
// Acquire, Extend and Release each return after the grace alone (graceMin: the others answered
// at once), not the node timeout; the hung node's call of each round ends at the round's
// deadline, node timeout after the round began, with DeadlineExceeded (nothing cancels it).
func TestHungNodeCutOffAtNodeTimeoutAndQuorumReturnsAtOnce_review16f(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		log := &callLog{}
		_, ss := scriptedNodes(3, hangOn(log, 2), nil)
		s := mustNew(t, ss, redlock.WithNodeTimeout(timeout))
		ctx := context.Background()
		req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
		ops := []struct {
			op string
			do func() error
		}{
			{"acquire", func() error {
				r, err := s.Acquire(ctx, req)
				if err == nil && !r.Granted {
					err = errors.New("refused")
				}
				return err
			}},
			{"extend", func() error {
				_, err := s.Extend(ctx, core.ExtendRequest{Key: "k", Holder: "a", TTL: time.Minute})
				return err
			}},
			{"release", func() error {
				ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"})
				if err == nil && !ok {
					err = errors.New("not held")
				}
				return err
			}},
		}
		for _, o := range ops {
			begin := time.Now()
			if err := o.do(); err != nil {
				t.Fatalf("%s with node 2 hung: %v", o.op, err)
			}
			if took := time.Since(begin); took != 2*time.Millisecond {
				t.Errorf("%s with node 2 hung took %v, want the grace alone (2ms), far below the node timeout %v", o.op, took, timeout)
			}
		}
		synctest.Wait()
		time.Sleep(timeout) // fake time: every round's deadline passes
		synctest.Wait()
		for _, o := range ops {
			calls := log.get(2, o.op)
			if len(calls) != 1 {
				t.Fatalf("node 2 got %d %s calls, want 1", len(calls), o.op)
			}
			c := calls[0]
			if !c.ended || c.end.Sub(c.begin) != timeout || !errors.Is(c.err, context.DeadlineExceeded) {
				t.Errorf("node 2's hung %s: ended %v after %v with %v; want cut off at the node timeout %v with DeadlineExceeded", o.op, c.ended, c.end.Sub(c.begin), c.err, timeout)
			}
		}
	})
}

// TestRoundEveryNodeAnsweredWaitsNoGraceAndEndsItsContext_review16f: when every node answers at
// once, Release returns without waiting (no grace timer), and the round's context is canceled
// (its timer stopped) as soon as the last node answered, not left to its deadline.
func TestRoundEveryNodeAnsweredWaitsNoGraceAndEndsItsContext_review16f(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &callLog{}
		_, ss := scriptedNodes(3, hangOn(log), nil)
		s := mustNew(t, ss, redlock.WithNodeTimeout(time.Second))
		ctx := context.Background()
		begin := time.Now()
		if _, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begin); took != 0 {
			t.Errorf("Release with every node answering at once took %v, want no wait", took)
		}
		for i := range 3 {
			c := log.get(i, "release")
			if len(c) != 1 {
				t.Fatalf("node %d: %d release calls, want 1", i, len(c))
			}
			if err := c[0].ctx.Err(); !errors.Is(err, context.Canceled) {
				t.Errorf("node %d's call context after the round: %v, want Canceled (the round's timer stopped when the last node answered)", i, err)
			}
		}
	})
}

// TestSlowerNodeGetsAsLongAgainAndGoesOnAfterDecision_review16f: nodes 0 and 1 answer a release
// after 10ms. A node 2 answering after 15ms is waited for (the grace is as long again); one
// answering after 25ms is left behind at 20ms, and its release still completes, uncanceled,
// after the caller's ctx ended.
func TestSlowerNodeGetsAsLongAgainAndGoesOnAfterDecision_review16f(t *testing.T) {
	for _, tc := range []struct {
		slow, want time.Duration
	}{{15 * time.Millisecond, 15 * time.Millisecond}, {25 * time.Millisecond, 20 * time.Millisecond}} {
		synctest.Test(t, func(t *testing.T) {
			log := &callLog{}
			before := func(ctx context.Context, i int, op string) error {
				c := log.add(ctx, i, op)
				d := 10 * time.Millisecond
				if i == 2 {
					d = tc.slow
				}
				time.Sleep(d) // a slow node, ignoring ctx
				log.finish(c, ctx.Err())
				return nil
			}
			ns, ss := scriptedNodes(3, before, nil)
			s := mustNew(t, ss, redlock.WithNodeTimeout(time.Second))
			req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
			for _, n := range ns {
				if r, err := n.Store.Acquire(context.Background(), req); err != nil || !r.Granted {
					t.Fatal(r, err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			begin := time.Now()
			ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"})
			cancel()
			if err != nil || !ok {
				t.Fatalf("Release: %v, %v", ok, err)
			}
			if took := time.Since(begin); took != tc.want {
				t.Errorf("node 2 answering after %v: Release took %v, want %v", tc.slow, took, tc.want)
			}
			synctest.Wait()
			time.Sleep(tc.slow)
			synctest.Wait()
			c := log.get(2, "release")
			if len(c) != 1 || !c[0].ended || c[0].err != nil {
				t.Fatalf("node 2's release: %+v; want it ended with its context live", c)
			}
			if snap, err := ns[2].Store.Inspect(context.Background(), "k"); err != nil || len(snap.Leases) != 0 {
				t.Errorf("node 2 after its late release: %+v, %v; want the lease released", snap, err)
			}
		})
	}
}

// TestCtxEndingAfterDecisionDoesNotCancelStragglers_review16f: a Release decided by nodes 0 and
// 1 is waiting its grace for node 2 when the caller's ctx ends. The round was decided: node 2's
// call must go on (Store's doc: "the other nodes' releases finish in the background"), and end
// at its deadline, not be canceled by the caller's ctx.
func TestCtxEndingAfterDecisionDoesNotCancelStragglers_review16f(t *testing.T) {
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

// TestCtxEndingBeforeDecisionCancelsEveryCall_review16f: every node hangs; the caller's ctx ends
// and Release returns its error. Every node's call must then be canceled, whenever the ctx's
// AfterFunc callbacks run: fanout must not rely on its AfterFunc having run before it stops it
// (with a context.WithCancel ctx too, Done is closed before the AfterFunc is started, so fanout
// can stop it first).
func TestCtxEndingBeforeDecisionCancelsEveryCall_review16f(t *testing.T) {
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

// TestRaiseRoundHasItsOwnDeadline_review16f: the first round's answers come 90ms into a 100ms
// node timeout, with different fences; the raise round that follows must get a whole node
// timeout of its own, not what is left of the first round's.
func TestRaiseRoundHasItsOwnDeadline_review16f(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		var mu sync.Mutex
		var raiseLeft []time.Duration
		before := func(ctx context.Context, i int, op string) error {
			switch op {
			case "acquire":
				time.Sleep(90 * time.Millisecond)
			case "raise":
				d, ok := ctx.Deadline()
				mu.Lock()
				if ok {
					raiseLeft = append(raiseLeft, time.Until(d))
				} else {
					raiseLeft = append(raiseLeft, -1)
				}
				mu.Unlock()
				time.Sleep(50 * time.Millisecond) // more than the first round's deadline leaves
			}
			return ctx.Err()
		}
		ns, ss := scriptedNodes(3, before, nil)
		s := mustNew(t, ss, redlock.WithNodeTimeout(timeout))
		ctx := context.Background()
		bump := core.AcquireRequest{Key: "k", Holder: "bump", Permits: 1, Limit: 1, TTL: time.Minute}
		if _, err := ns[0].Store.AcquireAbove(ctx, bump, uint64(time.Now().Add(time.Hour).UnixMicro())); err != nil {
			t.Fatal(err)
		}
		if _, err := ns[0].Store.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "bump"}); err != nil {
			t.Fatal(err)
		}
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute})
		if err != nil || !res.Granted {
			t.Fatalf("Acquire: %+v, %v; want granted after a raise", res, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(raiseLeft) == 0 {
			t.Fatal("no raise round: the nodes' fences did not differ")
		}
		for _, left := range raiseLeft {
			if left != timeout {
				t.Errorf("a raise call started with %v to its deadline, want a whole node timeout (%v)", left, timeout)
			}
		}
		for i, n := range ns {
			if snap, err := n.Store.Inspect(ctx, "k"); err != nil || len(snap.Leases) != 1 || snap.Leases[0].Fence != res.Fence {
				t.Errorf("node %d: %+v, %v; want a's lease at fence %d", i, snap, err, res.Fence)
			}
		}
	})
}

// TestGrantAnsweredAfterDeadlineIsReleased_review16f: nodes 0 and 1 refuse (another holder);
// node 2 grants at once but its answer reaches us only after the round's deadline (the answer
// ignores ctx). The late grant is a straggler's after a refusal: it is released.
func TestGrantAnsweredAfterDeadlineIsReleased_review16f(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		released := make(chan struct{})
		after := func(ctx context.Context, i int, op string) {
			switch {
			case i == 2 && op == "acquire":
				time.Sleep(2 * timeout) // the answer is late, past the round's deadline
			case i == 2 && op == "release":
				close(released)
			}
		}
		ns, ss := scriptedNodes(3, nil, after)
		s := mustNew(t, ss, redlock.WithNodeTimeout(timeout))
		ctx := context.Background()
		other := core.AcquireRequest{Key: "k", Holder: "other", Permits: 1, Limit: 1, TTL: time.Hour}
		for _, n := range ns[:2] {
			if r, err := n.Store.Acquire(ctx, other); err != nil || !r.Granted {
				t.Fatal(r, err)
			}
		}
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute})
		if err != nil || res.Granted {
			t.Fatalf("Acquire: %+v, %v; want refused", res, err)
		}
		<-released
		if snap, err := ns[2].Store.Inspect(ctx, "k"); err != nil || len(snap.Leases) != 0 {
			t.Errorf("node 2 after its late grant was settled: %+v, %v; want released", snap, err)
		}
	})
}

// TestCtxEndedFirstCallsNoNode_review16f: with ctx ended before the call, no node is asked and
// each operation returns ctx's error.
func TestCtxEndedFirstCallsNoNode_review16f(t *testing.T) {
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

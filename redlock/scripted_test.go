package redlock_test

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

// Scripted nodes, for the tests of fan-out rounds (fanout_test.go, ctx_test.go, raise_test.go):
// they run in synctest bubbles, where node delays are fake time and synctest.Wait is the
// synchronisation.

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

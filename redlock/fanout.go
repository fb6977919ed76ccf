package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

type result[T any] struct {
	v   T
	err error
}

// errNoAnswer stands for the answer of a node that had not answered when its call's outcome
// was decided.
var errNoAnswer = errors.New("no answer yet")

// call is one fan-out: a call to some nodes in parallel, decided by the first answers that
// settle its outcome. Answers that come after it was decided (stragglers) go to the handler
// set by then.
type call[T any] struct {
	mu       sync.Mutex
	res      []result[T]
	waiting  int                // nodes that have not answered
	decided  bool               // the caller has taken its results: later answers are stragglers
	done     chan struct{}      // closed once when decided
	all      chan struct{}      // closed once every node answered
	cancel   context.CancelFunc // of the calls' context: when the last one ends, or ctx did first
	late     func(i int, r result[T])
	set      bool  // then was called
	stragged []int // stragglers that answered before then
}

// graceMin is the least time a decided fan-out waits on for the nodes that have not answered.
const graceMin = 2 * time.Millisecond

// round is what one fan-out does: call each of nodes (every node when nil), each call bounded
// by timeout, until decided reports that the answers so far settle the outcome (nil: wait for
// every node).
type round[T any] struct {
	timeout time.Duration
	nodes   []int
	call    func(ctx context.Context, i int, n node) (T, error)
	decided func([]result[T]) bool
}

// fanout makes r's calls in parallel and returns the results, indexed like s.nodes, once
// r.decided reports that the answers so far settle the outcome and the others had as long again
// to come (at least graceMin), or every node answered, or ctx ended. A node that had not
// answered then has errNoAnswer. Each call
// runs on its own goroutine, which ends when the call does, within timeout. Calls still out
// when the outcome is decided go on (ctx's cancellation no longer reaches them): a straggler's
// answer is handed to the function given to then, on its goroutine. When ctx ends first, the
// calls are canceled; when it has ended already, no call is made. The caller must call then
// once (with nil to drop the stragglers' answers).
func fanout[T any](ctx context.Context, s *Store, r round[T]) ([]result[T], *call[T]) {
	idx := r.nodes
	if idx == nil {
		idx = make([]int, len(s.nodes))
		for i := range idx {
			idx[i] = i
		}
	}
	if ctx.Err() != nil {
		idx = nil
	}
	begin := time.Now()
	c := &call[T]{res: make([]result[T], len(s.nodes)), waiting: len(idx), done: make(chan struct{}), all: make(chan struct{})}
	for i := range c.res {
		c.res[i].err = errNoAnswer
	}
	// One deadline serves every call of the round: they all start now.
	base, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	c.cancel = cancel
	for _, i := range idx {
		go func() {
			v, err := r.call(base, i, s.nodes[i])
			c.answer(i, result[T]{v, err}, r.decided)
		}()
	}
	if len(idx) == 0 {
		c.decided = true
		close(c.done)
		close(c.all)
		cancel()
	}
	select {
	case <-c.done:
		// Decided: give the other nodes as long again (at least graceMin) to answer, so that a
		// node merely slower than the quorum, not hung, is not left behind (a release it has not
		// done yet would refuse the next acquire that needs it).
		select {
		case <-c.all: // every node answered: nobody to wait for
		default:
			t := time.NewTimer(max(time.Since(begin), graceMin))
			select {
			case <-c.all:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.decided {
		// ctx ended first: cancel the calls. Only then: once decided, the calls still out are
		// stragglers and go on, even when ctx ends during the grace (so no context.AfterFunc,
		// which would cancel them then, and may be stopped before it runs when ctx ends first).
		c.decided = true
		close(c.done)
		cancel()
	}
	return slices.Clone(c.res), c
}

// answer records node i's answer, or hands it on as a straggler's.
func (c *call[T]) answer(i int, r result[T], decide func([]result[T]) bool) {
	c.mu.Lock()
	if c.waiting--; c.waiting == 0 {
		c.cancel()
		close(c.all)
	}
	if !c.decided {
		c.res[i] = r
		if c.waiting == 0 || (decide != nil && decide(c.res)) {
			c.decided = true
			close(c.done)
		}
		c.mu.Unlock()
		return
	}
	c.res[i] = r
	late, set := c.late, c.set
	if !set {
		c.stragged = append(c.stragged, i)
	}
	c.mu.Unlock()
	if set && late != nil {
		late(i, r)
	}
}

// then sets what happens to stragglers' answers: late runs on the straggler's goroutine, or on
// a new one for those that answered before then was called. A nil late drops them. It returns
// the number of calls to late to come.
func (c *call[T]) then(late func(i int, r result[T])) int {
	c.mu.Lock()
	c.late, c.set = late, true
	early := c.stragged
	c.stragged = nil
	res := slices.Clone(c.res)
	n := c.waiting + len(early)
	c.mu.Unlock()
	if late == nil {
		return 0
	}
	for _, i := range early {
		go late(i, res[i])
	}
	return n
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

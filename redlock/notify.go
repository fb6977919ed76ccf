package redlock

import (
	"context"
	"errors"
	"reflect"
	"sync"

	"github.com/leasehold/leasehold/core"
)

// Register implements core.Notifier by enrolling on every node that offers notifications, in
// parallel, each bounded by the node timeout (a hung node is left out), and merging their
// wakes: a release through any node wakes the waiter. The merged waiter is Reliable only while
// every node's waiter is: with a node without notifications, or whose subscription is down or
// was not confirmed in time, waiters fall back to their retry interval. While the waiter is
// open, Acquire sends req.Holder's tries on req.Key with their Wait in one round (its places in
// the nodes' lines are wanted). It runs one goroutine, which ends with Close.
func (s *Store) Register(ctx context.Context, req core.AcquireRequest) (core.Waiter, error) {
	w := &waiter{s: s, id: waiterID{req.Key, req.Holder}, n: len(s.nodes), ch: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	nws := make([]core.Waiter, len(s.nodes))
	errs := make([]error, len(s.nodes))
	var wg sync.WaitGroup
	for i, n := range s.nodes {
		nt, ok := n.(core.Notifier)
		if !ok {
			continue
		}
		wg.Go(func() {
			c, cancel := context.WithTimeout(ctx, s.nodeTimeout(req.TTL))
			defer cancel()
			nws[i], errs[i] = nt.Register(c, req)
		})
	}
	wg.Wait()
	for i, nw := range nws {
		if errs[i] == nil && nw != nil {
			w.nodes = append(w.nodes, nw)
		}
	}
	if len(w.nodes) == 0 {
		return nil, wrap("register", req.Key, errors.Join(append(errs, errors.New("no node offers notifications"))...))
	}
	s.mu.Lock()
	s.waiters[w.id]++
	s.mu.Unlock()
	// A node's waiter that starts woken starts the merged one woken, before merge runs, so
	// the caller sees it at once and sees it once.
	for _, nw := range w.nodes {
		select {
		case <-nw.C():
			select {
			case w.ch <- struct{}{}:
			default:
			}
		default:
		}
	}
	go w.merge()
	return w, nil
}

// enrolled reports whether a waiter from Register is open for holder on key.
func (s *Store) enrolled(key, holder string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiters[waiterID{key, holder}] > 0
}

type waiter struct {
	s     *Store
	id    waiterID
	n     int // nodes in the Store
	nodes []core.Waiter
	ch    chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

// merge forwards any node's wake to ch until stopped.
func (w *waiter) merge() {
	defer close(w.done)
	cases := make([]reflect.SelectCase, 0, len(w.nodes)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.stop)})
	for _, n := range w.nodes {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(n.C())})
	}
	for {
		if i, _, _ := reflect.Select(cases); i == 0 {
			return
		}
		select {
		case w.ch <- struct{}{}:
		default: // already woken; the wakes coalesce
		}
	}
}

func (w *waiter) C() <-chan struct{} { return w.ch }

func (w *waiter) Reliable() bool {
	for _, nw := range w.nodes {
		if !nw.Reliable() {
			return false
		}
	}
	return len(w.nodes) == w.n
}

func (w *waiter) Close(unused bool) {
	select {
	case <-w.stop:
		return
	default:
	}
	close(w.stop)
	<-w.done
	w.s.mu.Lock()
	if w.s.waiters[w.id]--; w.s.waiters[w.id] <= 0 {
		delete(w.s.waiters, w.id)
	}
	w.s.mu.Unlock()
	select {
	case <-w.ch:
		unused = true
	default:
	}
	for _, nw := range w.nodes {
		nw.Close(unused)
	}
}

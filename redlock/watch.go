package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/leasehold/leasehold/core"
)

var _ core.Watcher = (*Store)(nil)

// Watch implements core.Watcher over the nodes' watches: its C receives a value when any node's
// does, and it is Reliable while every node's is. Nodes that are not core.Watchers, or whose Watch
// fails, leave it unreliable, so that the caller also reads at an interval. Watch fails only when
// no node can watch: with an error wrapping errors.ErrUnsupported when no node is a core.Watcher.
// It costs one goroutine per node watch until Close, and each node's Watch (on Redis, a
// subscription on the Store's connection).
func (s *Store) Watch(ctx context.Context, key string) (core.Watch, error) {
	w := &watch{c: make(chan struct{}, 1), stop: make(chan struct{}), complete: true}
	var errs []error
	for i, n := range s.nodes {
		wr, ok := n.(core.Watcher)
		if !ok {
			w.complete = false
			continue
		}
		nw, err := wr.Watch(ctx, key)
		if err != nil {
			w.complete = false
			errs = append(errs, fmt.Errorf("node %d: %w", i, err))
			continue
		}
		w.nodes = append(w.nodes, nw)
	}
	if len(w.nodes) == 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(errs) == 0 {
			return nil, fmt.Errorf("redlock: no node is a core.Watcher: %w", errors.ErrUnsupported)
		}
		return nil, fmt.Errorf("redlock: no node can watch %q: %w", key, errors.Join(errs...))
	}
	for _, nw := range w.nodes {
		w.wg.Add(1)
		go w.forward(nw)
	}
	if !w.complete {
		w.wake() // an unreliable watch starts woken: the caller reads at once and then polls
	}
	return w, nil
}

// watch merges the nodes' watches on one key.
type watch struct {
	c        chan struct{}
	stop     chan struct{}
	nodes    []core.Watch
	complete bool // every node is watched
	wg       sync.WaitGroup
	once     sync.Once
}

func (w *watch) forward(nw core.Watch) {
	defer w.wg.Done()
	for {
		select {
		case <-nw.C():
			w.wake()
		case <-w.stop:
			return
		}
	}
}

func (w *watch) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// C implements core.Watch.
func (w *watch) C() <-chan struct{} { return w.c }

// Reliable implements core.Watch: every node is watched and every node's watch is reliable.
func (w *watch) Reliable() bool {
	if !w.complete {
		return false
	}
	for _, nw := range w.nodes {
		if !nw.Reliable() {
			return false
		}
	}
	return true
}

// Close implements core.Watch: it closes the nodes' watches and waits for its goroutines, which
// end at once.
func (w *watch) Close() {
	w.once.Do(func() {
		close(w.stop)
		w.wg.Wait()
		for _, nw := range w.nodes {
			nw.Close()
		}
	})
}

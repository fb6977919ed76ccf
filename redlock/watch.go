package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/leasehold/leasehold/core"
)

var (
	_ core.Watcher        = (*Store)(nil)
	_ core.AcquireWatcher = (*Store)(nil)
)

// Watch implements core.Watcher over the nodes' watches: its C receives a value when any node's
// does, and it is Reliable while every node's is. Nodes that are not core.Watchers, or whose Watch
// fails, leave it unreliable, so that the caller also reads at an interval. Watch fails only when
// no node can watch: with an error wrapping errors.ErrUnsupported when no node is a core.Watcher.
// It costs one goroutine per node watch until Close, and each node's Watch, made in parallel (on
// Redis, a script call and a subscription on the Store's connection).
func (s *Store) Watch(ctx context.Context, key string) (core.Wake, error) {
	return s.watch(ctx, key, nil)
}

// WatchAcquire watches req.Key for a caller whose Acquire of req was just refused and who will try
// again when woken, as a waiter does (package primitives uses it in place of Watch). Its C
// receives a value only when the changes since the caller's latest refused Acquire of req (same
// key and holder) could let a quorum grant: when at least QuorumFor(req.Permits, req.Limit) nodes
// either granted that try (and the grant was given back) or have changed since. A change on a
// node that granted the try cannot make room, and is not announced: a waiter is not woken by its
// own grants given back, nor by other waiters' tries on nodes that have room. A node that did not
// answer the try (an error, or no answer by the node timeout; not one the try did not wait for,
// which counts as one that granted) counts once it changes, and makes the watch
// not Reliable until a try has its answer again: its recovery is not announced, so the caller
// also tries at its retry interval (a wake at once would have it try in a loop while the node is
// down). Each refused Acquire of req resets the count, and wakes C at once if the
// changes during the try already make a quorum. The watch starts with a value in C (a change
// between the refused try and the watch would go unseen), and C also receives when its
// reliability changes. Before it returns, it waits for each node's watch to be reliable (on
// Redis, its subscription confirmed; about a round trip, the first time), at most the node
// timeout of a call without a TTL: a confirmation that came later would wake the caller for
// nothing. Reliable, Close, the other costs and the errors are Watch's.
func (s *Store) WatchAcquire(ctx context.Context, req core.AcquireRequest) (core.Wake, error) {
	return s.watch(ctx, req.Key, &req)
}

func (s *Store) watch(ctx context.Context, key string, req *core.AcquireRequest) (core.Wake, error) {
	n := len(s.nodes)
	// The most WatchAcquire waits for the nodes' watches to be reliable.
	bound, cancel := context.WithTimeout(ctx, s.nodeTimeout(0))
	defer cancel()
	w := &watch{s: s, c: make(chan struct{}, 1), stop: make(chan struct{}), nodes: make([]core.Wake, n),
		seq: make([]uint64, n), base: make([]uint64, n), refused: make([]bool, n),
		unknown: make([]bool, n), quorum: 1}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, nd := range s.nodes {
		wr, ok := nd.(core.Watcher)
		if !ok {
			continue
		}
		wg.Go(func() {
			nw, err := wr.Watch(ctx, key)
			if err != nil {
				errs[i] = fmt.Errorf("node %d: %w", i, err)
				return
			}
			w.nodes[i] = nw
			if req != nil {
				awaitReliable(bound, nw)
			}
		})
	}
	wg.Wait()
	watched := 0
	for _, nw := range w.nodes {
		if nw != nil {
			watched++
		}
	}
	if watched == 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("redlock: no node can watch %q: %w", key, err)
		}
		return nil, fmt.Errorf("redlock: no node is a core.Watcher: %w", errors.ErrUnsupported)
	}
	w.complete = watched == n
	w.reliable = w.Reliable()
	w.wake()
	if req != nil {
		w.lease, w.registered = keyHolder{req.Key, req.Holder}, true
		w.quorum = s.QuorumFor(req.Permits, req.Limit)
		s.wmu.Lock()
		s.waits[w.lease] = append(s.waits[w.lease], w)
		s.wmu.Unlock()
	}
	for i, nw := range w.nodes {
		if nw != nil {
			w.wg.Add(1)
			go w.forward(i, nw)
		}
	}
	return w, nil
}

// awaitReliable takes what a node's new watch nw has announced so far, and waits until nw is
// reliable (its subscription confirmed, on Redis) or ctx ends, taking what it announces
// meanwhile. A change announced before the merged watch is returned is in what the caller reads
// next (the merged watch starts with a value in C), and a subscription confirmed by then spares
// the caller a try for the confirmation's wake.
func awaitReliable(ctx context.Context, nw core.Wake) {
	for {
		select {
		case <-nw.C():
		default:
		}
		if nw.Reliable() {
			return
		}
		select {
		case <-nw.C():
		case <-ctx.Done():
			return
		}
	}
}

// watch merges the nodes' watches on one key. For WatchAcquire it wakes C only when a quorum of
// nodes could have room for the caller (see ready); for Watch every node's change wakes it.
type watch struct {
	s        *Store
	c        chan struct{}
	stop     chan struct{}
	nodes    []core.Wake // indexed like s.nodes; nil where the node is not watched
	complete bool        // every node is watched
	wg       sync.WaitGroup
	once     sync.Once

	lease      keyHolder // the waiter's, for WatchAcquire: its Acquires update the watch
	registered bool      // in s.waits: a WatchAcquire watch
	quorum     int       // nodes that must have room; 1 for Watch: any change wakes it

	mu       sync.Mutex
	seq      []uint64 // per node, the changes seen
	base     []uint64 // per node, seq when the latest refused try was sent
	refused  []bool   // per node, it refused the latest refused try
	unknown  []bool   // per node, it did not answer the latest refused try (an error, or too late)
	reliable bool     // what Reliable said at the latest change
}

// snapshot returns the changes seen on each node so far: an Acquire takes it before it asks
// the nodes, and hands it to tried.
func (w *watch) snapshot() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seq)
}

// tried records a refused Acquire of the waiter's, sent when the watch had seen snap: the nodes
// that refused it count again only once they change (a change since snap counts: it may have come
// after the node answered). It takes back a wake that came before, and wakes at once if a
// quorum could already have room.
func (w *watch) tried(snap []uint64, res []result[core.AcquireResult]) {
	// A try decided by its answers before a node's came did not wait for that node: it is no
	// failed node, and cannot by itself make the quorum the try lacked.
	early := acquireDecided(res, w.quorum)
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, r := range res {
		w.refused[i] = (r.err == nil && !r.v.Granted) || errors.Is(r.err, core.ErrLimitMismatch)
		w.unknown[i] = r.err != nil && !w.refused[i] && (r.err != errNoAnswer || !early)
		w.base[i] = snap[i]
	}
	select {
	case <-w.c:
	default:
	}
	rel := w.reliableLocked()
	if rel != w.reliable || w.ready() {
		w.reliable = rel
		w.wake()
	}
}

// ready reports whether a quorum of nodes could have room: nodes that granted the latest refused
// try, that are not watched (nothing is heard of them: the caller, whose watch is then
// unreliable, also tries at its retry interval), or that changed since. Nodes that did not
// answer it count only once they change: until then the watch is not reliable, and the caller
// tries at its retry interval. w.mu must be held.
func (w *watch) ready() bool {
	room := 0
	for i := range w.nodes {
		if (!w.refused[i] && !w.unknown[i]) || w.nodes[i] == nil || w.seq[i] != w.base[i] {
			room++
		}
	}
	return room >= w.quorum
}

// changed records a change on node i, and wakes C when a quorum could now have room or when
// the watch's reliability changed.
func (w *watch) changed(i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq[i]++
	rel := w.reliableLocked()
	if rel != w.reliable || w.ready() {
		w.reliable = rel
		w.wake()
	}
}

func (w *watch) forward(i int, nw core.Wake) {
	defer w.wg.Done()
	for {
		select {
		case <-nw.C():
			w.changed(i)
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

// C implements core.Wake.
func (w *watch) C() <-chan struct{} { return w.c }

// Reliable implements core.Wake: every node is watched, every node's watch is reliable, and
// (for WatchAcquire) every node answered the caller's latest refused try.
func (w *watch) Reliable() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reliableLocked()
}

// reliableLocked is Reliable; w.mu must be held.
func (w *watch) reliableLocked() bool {
	if !w.complete || slices.Contains(w.unknown, true) {
		return false
	}
	for _, nw := range w.nodes {
		if !nw.Reliable() {
			return false
		}
	}
	return true
}

// Close implements core.Wake: it closes the nodes' watches and waits for its goroutines, which
// end at once.
func (w *watch) Close() {
	w.once.Do(func() {
		if w.registered {
			w.s.wmu.Lock()
			ws := slices.DeleteFunc(w.s.waits[w.lease], func(x *watch) bool { return x == w })
			if len(ws) == 0 {
				delete(w.s.waits, w.lease)
			} else {
				w.s.waits[w.lease] = ws
			}
			w.s.wmu.Unlock()
		}
		close(w.stop)
		w.wg.Wait()
		for _, nw := range w.nodes {
			if nw != nil {
				nw.Close()
			}
		}
	})
}

// waiting returns the WatchAcquire watches of lease and what each has seen so far, for an
// Acquire of lease about to ask the nodes; nothing when none (the common case costs a map
// lookup).
func (s *Store) waiting(lease keyHolder) ([]*watch, [][]uint64) {
	s.wmu.Lock()
	ws := slices.Clone(s.waits[lease])
	s.wmu.Unlock()
	if len(ws) == 0 {
		return nil, nil
	}
	snaps := make([][]uint64, len(ws))
	for i, w := range ws {
		snaps[i] = w.snapshot()
	}
	return ws, snaps
}

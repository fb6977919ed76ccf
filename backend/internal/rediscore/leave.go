package rediscore

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// leaveTimeout bounds a waiter's leaving the line, which runs in the background and is retried
// until then (so a Store's Close waits at most that long for what it owes the lines).
const leaveTimeout = 2 * time.Second

// leaves are the leave scripts a Store sends in the background, by key and holder: the next try
// of that holder on that key waits for them, so that a late leave never ends what a newer call
// was granted.
type leaves struct {
	mu     sync.Mutex     // orders start's wg.Go before close's wg.Wait
	closed bool           // close has stopped taking leaves; guarded by mu
	wg     sync.WaitGroup // the leaves being sent

	pendingMu sync.Mutex
	pending   map[string]*pendingLeave // key+"\x00"+holder → its leaves not yet sent
	n         atomic.Int32             // len(pending), for the hot path
}

type pendingLeave struct {
	n    int
	done chan struct{}
}

// start runs send for holder's leave of key on a goroutine of its own, unless close has run.
func (ls *leaves) start(key, holder string, send func()) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return
	}
	id := key + "\x00" + holder
	ls.pendingMu.Lock()
	p := ls.pending[id]
	if p == nil {
		p = &pendingLeave{done: make(chan struct{})}
		ls.pending[id] = p
		ls.n.Add(1)
	}
	p.n++
	ls.pendingMu.Unlock()
	ls.wg.Go(func() {
		send()
		ls.pendingMu.Lock()
		if p.n--; p.n == 0 {
			delete(ls.pending, id)
			ls.n.Add(-1)
			close(p.done)
		}
		ls.pendingMu.Unlock()
	})
}

// await returns when no leave of holder on key is pending (each is bounded by leaveTimeout), or
// with ctx's error.
func (ls *leaves) await(ctx context.Context, key, holder string) error {
	if ls.n.Load() == 0 {
		return nil
	}
	ls.pendingMu.Lock()
	p := ls.pending[key+"\x00"+holder]
	ls.pendingMu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// awaitKey returns when no leave of any holder on key is pending, or with ctx's error.
func (ls *leaves) awaitKey(ctx context.Context, key string) error {
	if ls.n.Load() == 0 {
		return nil
	}
	var dones []chan struct{}
	ls.pendingMu.Lock()
	for id, p := range ls.pending {
		if k, _, _ := strings.Cut(id, "\x00"); k == key {
			dones = append(dones, p.done)
		}
	}
	ls.pendingMu.Unlock()
	for _, done := range dones {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// close drops the leaves started after it and waits for those started before.
func (ls *leaves) close() {
	ls.mu.Lock()
	ls.closed = true // Wait follows every Go
	ls.mu.Unlock()
	ls.wg.Wait()
}

// leave takes holder, which gave up waiting after a refusal that reported floor, out of key's
// line in the background, passing a lease granted to it since on. Close waits for it, and sends
// those its waiters still owe.
func (s *Store) leave(key, holder string, floor uint64) {
	s.leaveWith(key, holder, leaveArgs(holder, floor))
}

// leaveWith is leave with the leave script's ARGV given.
func (s *Store) leaveWith(key, holder string, args argList) {
	s.leaves.start(key, holder, func() {
		ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		defer cancel()
		// A leave that fails (a connection broken, say) is sent again until leaveTimeout: the
		// place it gives up would otherwise stay until the waiter's wait lapses.
		for backoff := 10 * time.Millisecond; s.leaveNow(ctx, key, args) != nil; backoff = min(2*backoff, 200*time.Millisecond) {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
				continue
			}
			break
		}
	})
}

// leaveNow sends the leave script once and reports its error. It is not s.run: a closing Store
// still sends what its waiters owe the line. A leave that never gets through leaves the place to
// lapse with the waiter's wait, and a grant made meanwhile to expire with its TTL.
func (s *Store) leaveNow(ctx context.Context, key string, args argList) error {
	r, err := s.client.Run(ctx, leaveScript, call(leaveScript, s.keyNames(key), &args))
	if err != nil {
		return err
	}
	if grants, err := parseGrants(r); err == nil {
		s.granted(key, grants)
	}
	return nil
}

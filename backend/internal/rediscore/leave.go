package rediscore

import (
	"context"
	"slices"
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
	// unsure are the leaves, by key+"\x00"+holder, that were sent but not all of whose sends
	// were answered: a send may still reach the server, after the holder's next try. That try
	// names them (overtaken), which keeps them from doing anything when they arrive. Guarded by
	// pendingMu.
	unsure  map[string][]unsureLeave
	unsureN atomic.Int32 // len(unsure), for the hot path
}

// unsureLeave is a leave that may still arrive: its id, and when its last send ended.
type unsureLeave struct {
	id string
	at time.Time
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

// unanswered records that the leave of holder on key named by ids (its own id, and the try it
// gave up, if any) may still reach the server, and forgets the leaves recorded tryHold ago or
// more (a holder that never tries again, as an unshared one, leaves nothing behind for longer).
func (ls *leaves) unanswered(key, holder string, ids ...string) {
	ls.pendingMu.Lock()
	defer ls.pendingMu.Unlock()
	if ls.unsure == nil {
		ls.unsure = map[string][]unsureLeave{}
	}
	for k, us := range ls.unsure {
		live := slices.DeleteFunc(us, func(u unsureLeave) bool { return time.Since(u.at) >= tryHold })
		ls.setUnsureLocked(k, live)
	}
	k := key + "\x00" + holder
	us := ls.unsure[k]
	for _, id := range ids {
		us = append(us, unsureLeave{id: id, at: time.Now()})
	}
	ls.setUnsureLocked(k, us)
}

// overtaken returns the ids, space-separated, of holder's leaves of key that may still reach
// the server, sent less than tryHold ago (a leave later than that is not kept out), for the
// holder's next try to name; "" when there are none.
func (ls *leaves) overtaken(key, holder string) string {
	if ls.unsureN.Load() == 0 {
		return ""
	}
	ls.pendingMu.Lock()
	defer ls.pendingMu.Unlock()
	k := key + "\x00" + holder
	var ids []string
	live := ls.unsure[k][:0]
	for _, u := range ls.unsure[k] {
		if time.Since(u.at) < tryHold {
			live = append(live, u)
			ids = append(ids, u.id)
		}
	}
	ls.setUnsureLocked(k, live)
	return strings.Join(ids, " ")
}

// overtook records that a try named the leaves ids (as overtaken returned them) and was
// answered: the server keeps them out, and the holder's later tries need not name them.
func (ls *leaves) overtook(key, holder, ids string) {
	ls.pendingMu.Lock()
	defer ls.pendingMu.Unlock()
	k := key + "\x00" + holder
	named := strings.Fields(ids)
	var live []unsureLeave
	for _, u := range ls.unsure[k] {
		if !slices.Contains(named, u.id) {
			live = append(live, u)
		}
	}
	ls.setUnsureLocked(k, live)
}

// setUnsureLocked sets the unsure leaves of k. pendingMu must be held.
func (ls *leaves) setUnsureLocked(k string, us []unsureLeave) {
	_, had := ls.unsure[k]
	switch {
	case len(us) == 0 && had:
		delete(ls.unsure, k)
		ls.unsureN.Add(-1)
	case len(us) > 0:
		if !had {
			ls.unsureN.Add(1)
		}
		ls.unsure[k] = us
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

// leaveWith is leave with the leave script's ARGV given. The leave has an id of its own: should
// one of its sends go unanswered (it may then reach the server late, after the holder's next
// try), that try names it, and the server keeps it from doing anything (see leaves.overtaken);
// it names the try the leave gives up too, which the server keeps out alike.
func (s *Store) leaveWith(key, holder string, args argList) {
	id := tryID(s.id, s.tries.Add(1))
	args = withLeaveID(args, id)
	s.leaves.start(key, holder, func() {
		ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		defer cancel()
		// A leave that fails (a connection broken, say) is sent again until leaveTimeout: the
		// place it gives up would otherwise stay until the waiter's wait lapses.
		unanswered := false
		for backoff := 10 * time.Millisecond; s.leaveNow(ctx, key, args) != nil; backoff = min(2*backoff, 200*time.Millisecond) {
			unanswered = true
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
				continue
			}
			break
		}
		if unanswered {
			// The try it gives up is named too: should the leave never arrive, the try, still on
			// its way, would take a place or a lease nobody holds after the holder's next try.
			if try, ok := args.v[2].(string); ok && try != "" {
				s.leaves.unanswered(key, holder, id, try)
			} else {
				s.leaves.unanswered(key, holder, id)
			}
		}
	})
}

// leaveNow sends the leave script once and reports its error. It is not s.run: a closing Store
// still sends what its waiters owe the line. A leave that never gets through leaves the place to
// lapse with the waiter's wait, and a grant made meanwhile to expire with its TTL.
func (s *Store) leaveNow(ctx context.Context, key string, args argList) error {
	r, err := s.fn.run(ctx, &s.wire, leaveScript, call(s.keyNames(key), &args))
	if err != nil {
		return err
	}
	if grants, err := parseGrants(r); err == nil {
		s.granted(key, grants)
	}
	return nil
}

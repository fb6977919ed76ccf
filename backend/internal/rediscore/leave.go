package rediscore

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/backend/internal/waitline"
)

// unsureLeaves are the leaves, by key+"\x00"+holder, that were sent but not all of whose sends
// were answered: a send may still reach the server, after the holder's next try. That try names
// them (overtaken), which keeps them from doing anything when they arrive.
type unsureLeaves struct {
	mu      sync.Mutex
	unsure  map[string][]unsureLeave // guarded by mu
	unsureN atomic.Int32             // len(unsure), for the hot path
}

// unsureLeave is a leave that may still arrive: its id, and when its last send ended.
type unsureLeave struct {
	id string
	at time.Time
}

// unanswered records that the leave of holder on key named by ids (its own id, and the try it
// gave up, if any) may still reach the server, and forgets the leaves recorded tryHold ago or
// more (a holder that never tries again, as an unshared one, leaves nothing behind for longer).
func (ls *unsureLeaves) unanswered(key, holder string, ids ...string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
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
func (ls *unsureLeaves) overtaken(key, holder string) string {
	if ls.unsureN.Load() == 0 {
		return ""
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
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
func (ls *unsureLeaves) overtook(key, holder, ids string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
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

// setUnsureLocked sets the unsure leaves of k. ls.mu must be held.
func (ls *unsureLeaves) setUnsureLocked(k string, us []unsureLeave) {
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

// leave takes holder, which gave up waiting after a refusal that reported floor, out of key's
// line in the background, passing a lease granted to it since on. Close waits for it, and sends
// those its waiters still owe.
func (s *Store) leave(key, holder string, floor uint64) {
	s.leaveWith(key, holder, leaveArgs(holder, floor))
}

// leaveWith is leave with the leave script's ARGV given, sent as waitline.Leaves sends it. The
// leave has an id of its own: should one of its sends go unanswered (it may then reach the
// server late, after the holder's next try), that try names it, and the server keeps it from
// doing anything (see unsureLeaves.overtaken); it names the try the leave gives up too, which
// the server keeps out alike, should the leave never arrive.
func (s *Store) leaveWith(key, holder string, args argList) {
	id := tryID(s.id, s.tries.Add(1))
	args = withLeaveID(args, id)
	unanswered := false
	s.leaves.Start(waitline.Leave{Key: key, Holder: holder,
		Send: func(ctx context.Context) error {
			err := s.leaveNow(ctx, key, args)
			if err != nil && !s.isReply(err) {
				unanswered = true
				return err
			}
			return nil // answered, with an error or not: sent again, it would be answered alike
		},
		After: func() {
			if !unanswered {
				return
			}
			if try, ok := args.v[2].(string); ok && try != "" {
				s.unsure.unanswered(key, holder, id, try)
			} else {
				s.unsure.unanswered(key, holder, id)
			}
		}})
}

// isReply reports whether err is the server's error reply to a call it ran, or would refuse
// alike if sent again (the adapter's ErrorReply); a reply of a server that ran nothing for now
// (transientReply) is not, and is sent again.
func (s *Store) isReply(err error) bool {
	msg, reply := s.wire.ErrorReply(err)
	return reply && !transientReply(msg)
}

// transientReply reports whether msg is an error reply of a server that ran nothing and may run
// the call sent again: busy with another client's script, loading its data, or a replica, a
// primary or a cluster in the middle of a failover.
func transientReply(msg string) bool {
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "BUSY", "LOADING", "TRYAGAIN", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "NOREPLICAS", "MOVED", "ASK":
		return true
	}
	return false
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

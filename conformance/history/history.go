// Package history records what the clients of a Leasehold store saw — every Acquire, Extend and
// Release at the store's boundary, and every write to a fenced resource, with the times each was
// invoked and returned — and checks the record mechanically:
//
//   - Linearizable: the store's answers fit a sequential lease semaphore (github.com/anishathalye/porcupine
//     searches the orders the overlaps allow): no grant while the permits of leases that cannot
//     have expired yet, plus its own, exceed the limit, and every new grant's fence is above every
//     fence granted before it on the key.
//   - FencesIncrease: a grant that began after another ended has the higher fence, across
//     whatever happened in between (a server restarted empty, say).
//   - the Resource's own record: it accepts a write only with a fence no lower than the highest it
//     has seen, so a stale holder's write is refused.
//   - WritesInFenceOrder: the writes to a fenced resource (a store's own, such as Redis's
//     Store.Fenced, recorded with AddWrite) were accepted in fence order, so no stale write landed;
//     Overlap measures how long the work of two holders (their Tenures) ran at once.
//
// Wrap a store with Record, run a workload (with faults: Fault, and LostReplies for a store
// in process), then check. A Recorder is safe for
// concurrent use.
package history

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
)

// Kind is what an Op did.
type Kind int

// The kinds of Op.
const (
	Acquire Kind = iota
	Extend
	Release
)

func (k Kind) String() string {
	return [...]string{"acquire", "extend", "release"}[k]
}

// Op is one store call as its client saw it.
type Op struct {
	Kind    Kind
	Key     string
	Holder  string
	Permits int           // Acquire
	Limit   int           // Acquire
	TTL     time.Duration // Acquire, Extend
	Call    time.Time     // when it was invoked
	Return  time.Time     // when it returned
	// OK is, for Acquire, whether it was granted; for Extend and Release, whether the holder held
	// the lease.
	OK    bool
	Fence uint64 // Acquire granted, Extend
	// Since, set by the checks on an Acquire grant, is the holder's first Acquire call on the key:
	// a grant from a line, which the holder's later call takes, may have been made that early.
	Since time.Time
	Err   error
}

// Recorder keeps Ops.
type Recorder struct {
	mu      sync.Mutex
	ops     []Op
	writes  []Write
	tenures []Tenure
}

// Add records op.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Ops returns a copy of what was recorded, in the order it was added.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// Record returns st with every Acquire, Extend and Release recorded in r. Other methods (the
// Notifier's Register, say) pass through when st has them.
func Record(st core.Store, r *Recorder) core.Store {
	rs := &recorded{Store: st, r: r}
	if n, ok := st.(core.Notifier); ok {
		return &recordedNotifier{recorded: rs, n: n}
	}
	return rs
}

type recorded struct {
	core.Store
	r *Recorder
}

type recordedNotifier struct {
	*recorded
	n core.Notifier
}

func (s *recordedNotifier) Register(ctx context.Context, req core.AcquireRequest) (core.Wake, error) {
	return s.n.Register(ctx, req)
}

func (s *recorded) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	call := time.Now()
	res, err := s.Store.Acquire(ctx, req)
	s.r.Add(Op{Kind: Acquire, Key: req.Key, Holder: req.Holder, Permits: req.Permits, Limit: req.Limit, TTL: req.TTL,
		Call: call, Return: time.Now(), OK: err == nil && res.Granted, Fence: res.Fence, Err: err})
	return res, err
}

func (s *recorded) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	call := time.Now()
	res, err := s.Store.Extend(ctx, req)
	s.r.Add(Op{Kind: Extend, Key: req.Key, Holder: req.Holder, TTL: req.TTL, Call: call, Return: time.Now(),
		OK: err == nil, Fence: res.Fence, Err: err})
	return res, err
}

func (s *recorded) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	call := time.Now()
	held, err := s.Store.Release(ctx, req)
	s.r.Add(Op{Kind: Release, Key: req.Key, Holder: req.Holder, Fence: req.Fence, Call: call, Return: time.Now(), OK: err == nil && held, Err: err})
	return held, err
}

// Violation is a way the history breaks a rule.
type Violation struct {
	Rule   string
	Key    string
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s on %q: %s", v.Rule, v.Key, v.Detail) }

// byKey groups ops by key, keeping their order.
func byKey(ops []Op) map[string][]Op {
	m := map[string][]Op{}
	for _, op := range ops {
		m[op.Key] = append(m[op.Key], op)
	}
	return m
}

// FencesIncrease checks that of two grants on a key, the one whose holder first asked for it
// after the other's grant returned has the higher fence. It holds across a store that lost its
// data, as long as its clock did not go back.
func FencesIncrease(ops []Op) []Violation {
	var out []Violation
	for key, kops := range byKey(ops) {
		// A grant may have been made as early as the holder's first Acquire call on the key (a
		// call that failed, or a grant from a line, may have taken effect then); a grant again
		// with a fence the holder already had is not a new grant.
		first := map[string]time.Time{}
		seen := map[string]map[uint64]bool{}
		var grants []Op
		for _, op := range kops {
			if op.Kind != Acquire {
				continue
			}
			if f, ok := first[op.Holder]; !ok || start(op).Before(f) {
				first[op.Holder] = start(op)
			}
			if !op.OK {
				continue
			}
			if seen[op.Holder] == nil {
				seen[op.Holder] = map[uint64]bool{}
			}
			if !seen[op.Holder][op.Fence] {
				seen[op.Holder][op.Fence] = true
				op.Since = first[op.Holder]
				grants = append(grants, op)
			}
		}
		slices.SortFunc(grants, func(a, b Op) int { return a.Return.Compare(b.Return) })
		// Scan by invocation: the highest fence among grants that returned before this call.
		byCall := slices.Clone(grants)
		slices.SortFunc(byCall, func(a, b Op) int { return start(a).Compare(start(b)) })
		var top Op
		j := 0
		for _, g := range byCall {
			for j < len(grants) && grants[j].Return.Before(start(g)) {
				if grants[j].Fence > top.Fence {
					top = grants[j]
				}
				j++
			}
			if top.Fence != 0 && g.Holder != top.Holder && g.Fence <= top.Fence {
				out = append(out, Violation{"fences increase", key, fmt.Sprintf(
					"%s was granted fence %d after %s's grant with fence %d had returned", g.Holder, g.Fence, top.Holder, top.Fence)})
			}
		}
	}
	return out
}

// start is when a grant may have been made from the caller's point of view: its call, or the
// Since of a grant handed over from a line.
func start(op Op) time.Time {
	if !op.Since.IsZero() && op.Since.Before(op.Call) {
		return op.Since
	}
	return op.Call
}

// Exclusive checks, per key, that the leases as their holders saw them — from the grant's
// return to the release's call — never held more than their limit at once. It is the cheap
// check for long histories; it assumes no lease outlived its TTL unreleased (no faults).
func Exclusive(ops []Op) []Violation {
	var out []Violation
	for key, kops := range byKey(ops) {
		type edge struct {
			at      time.Time
			permits int
			holder  string
		}
		granted := map[string]Op{} // holder → its open grant
		var edges []edge
		limit := 0
		for _, op := range kops {
			switch {
			case op.Kind == Acquire && op.OK:
				if _, open := granted[op.Holder]; !open {
					granted[op.Holder] = op
					edges = append(edges, edge{op.Return, op.Permits, op.Holder})
				}
				limit = op.Limit
			case op.Kind == Release:
				if g, open := granted[op.Holder]; open {
					delete(granted, op.Holder)
					edges = append(edges, edge{op.Call, -g.Permits, op.Holder})
				}
			}
		}
		// Ends before starts at the same instant: a handoff is not an overlap.
		slices.SortStableFunc(edges, func(a, b edge) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.permits - b.permits
		})
		held := 0
		for _, e := range edges {
			held += e.permits
			if held > limit {
				out = append(out, Violation{"exclusive", key, fmt.Sprintf("%d permits held at once at %v (limit %d) when %s got its lease",
					held, e.at.Format(time.StampMicro), limit, e.holder)})
				break
			}
		}
	}
	return out
}

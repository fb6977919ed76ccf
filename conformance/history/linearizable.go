package history

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// margin is how much earlier than its TTL a lease is taken to be possibly gone: the store's
// clock may run 1% fast against ours, and Redis keeps whole milliseconds.
func margin(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// lease is one lease in the model: its holder, permits and fence, and the time (ns since the
// history's start) after which it may have expired.
type lease struct {
	holder  string
	permits int
	limit   int
	fence   uint64
	until   int64
}

// state is the model of one key: every lease granted and not released (one past its until may
// have expired), and the last fence.
type state struct {
	leases []lease // sorted by holder
	last   uint64
}

type input struct {
	op           Op
	call, retNs  int64 // ns since the history's start
	start, until int64 // for a grant: when it may have been made, and when it may have expired
}

func (s state) find(holder string) int {
	i, ok := slices.BinarySearchFunc(s.leases, holder, func(l lease, h string) int { return strings.Compare(l.holder, h) })
	if !ok {
		return -1
	}
	return i
}

func (s state) with(l lease) state {
	ls := slices.Clone(s.leases)
	i, ok := slices.BinarySearchFunc(ls, l.holder, func(x lease, h string) int { return strings.Compare(x.holder, h) })
	if ok {
		ls[i] = l
	} else {
		ls = slices.Insert(ls, i, l)
	}
	return state{leases: ls, last: s.last}
}

func (s state) without(holder string) state {
	i := s.find(holder)
	if i < 0 {
		return s
	}
	return state{leases: slices.Delete(slices.Clone(s.leases), i, i+1), last: s.last}
}

// used returns the permits of the leases, other than holder's, that cannot have expired by t.
func (s state) used(t int64, holder string) int {
	n := 0
	for _, l := range s.leases {
		if l.until >= t && l.holder != holder {
			n += l.permits
		}
	}
	return n
}

// step is the sequential specification of a key. It is permissive wherever the client cannot
// know what happened (a call that failed may or may not have taken effect, a lease may have
// expired after its TTL less the margin), and strict where it can: a grant must fit the limit
// beside the leases that cannot have expired yet, a grant again to a holder (idempotent, same
// fence) and an extended lease must fit too (neither expired), an extension keeps its fence, and
// a new grant's fence must exceed every fence granted before it.
func step(st, in, _ any) (bool, any) {
	s, i := st.(state), in.(input)
	op, t := i.op, i.retNs
	switch op.Kind {
	case Acquire:
		if op.Err != nil || !op.OK {
			return true, s // a refusal constrains nothing; a failed call may have done anything
		}
		if j := s.find(op.Holder); j >= 0 {
			// Granted again to its holder: the lease never expired (an expired one is never
			// granted again with its fence), so it must fit beside the others now.
			l := s.leases[j]
			if op.Fence < l.fence || s.used(t, op.Holder)+op.Permits > op.Limit {
				return false, s
			}
			l.fence, l.until = op.Fence, max(l.until, i.until)
			ns := s.with(l)
			ns.last = max(ns.last, op.Fence)
			return true, ns
		}
		if s.used(t, "")+op.Permits > op.Limit || op.Fence <= s.last {
			return false, s
		}
		ns := s.with(lease{holder: op.Holder, permits: op.Permits, limit: op.Limit, fence: op.Fence, until: i.until})
		ns.last = op.Fence
		return true, ns
	case Extend:
		if op.Err != nil || !op.OK {
			return true, s
		}
		if j := s.find(op.Holder); j >= 0 {
			// An extended lease never expired, so it must fit beside the others now, and it
			// keeps its fence.
			l := s.leases[j]
			if op.Fence != l.fence || s.used(t, op.Holder)+l.permits > l.limit {
				return false, s
			}
			l.until = max(l.until, i.until)
			return true, s.with(l)
		}
		return true, s // a lease whose grant the history does not show (a failed call): permissive
	default: // Release
		return true, s.without(op.Holder)
	}
}

func equal(a, b any) bool {
	x, y := a.(state), b.(state)
	return x.last == y.last && slices.Equal(x.leases, y.leases)
}

func hash(st any) uint64 {
	s := st.(state)
	h := fnv.New64a()
	fmt.Fprint(h, s.last)
	for _, l := range s.leases {
		fmt.Fprint(h, l.holder, l.permits, l.limit, l.fence, l.until)
	}
	return h.Sum64()
}

var model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		m := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(input).op.Key
			if _, ok := m[k]; !ok {
				keys = append(keys, k)
			}
			m[k] = append(m[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, m[k])
		}
		return out
	},
	Init:  func() any { return state{} },
	Step:  step,
	Equal: equal,
	Hash:  hash,
	DescribeOperation: func(in, _ any) string {
		op := in.(input).op
		return fmt.Sprintf("%s %s %d → ok=%v fence=%d err=%v", op.Kind, op.Holder, op.Permits, op.OK, op.Fence, op.Err)
	},
}

// Linearizable checks the history against the model of a lease semaphore (see step), giving up
// after timeout. It returns the violations found: none, one per key whose history does not fit,
// or one saying the check did not finish.
func Linearizable(ops []Op, timeout time.Duration) []Violation {
	if len(ops) == 0 {
		return nil
	}
	t0 := ops[0].Call
	for _, op := range ops {
		if op.Call.Before(t0) {
			t0 = op.Call
		}
		if !op.Since.IsZero() && op.Since.Before(t0) {
			t0 = op.Since
		}
	}
	ns := func(t time.Time) int64 { return t.Sub(t0).Nanoseconds() }
	// A grant may have taken effect as early as its holder's first Acquire call on the key: a
	// call that failed, or a grant from a line the holder then found by a try, counts from there.
	first := map[[2]string]time.Time{}
	for _, op := range ops {
		k := [2]string{op.Key, op.Holder}
		if f, ok := first[k]; op.Kind == Acquire && (!ok || start(op).Before(f)) {
			first[k] = start(op)
		}
	}
	hist := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		in := input{op: op, call: ns(op.Call), retNs: ns(op.Return), start: ns(start(op))}
		if op.Kind == Acquire && op.OK {
			in.start = ns(first[[2]string{op.Key, op.Holder}])
		}
		in.until = in.start + (op.TTL - margin(op.TTL)).Nanoseconds()
		hist = append(hist, porcupine.Operation{Input: in, Call: in.start, Output: nil, Return: in.retNs})
	}
	var out []Violation
	for _, part := range model.Partition(hist) {
		key := part[0].Input.(input).op.Key
		switch porcupine.CheckOperationsTimeout(model, part, timeout) {
		case porcupine.Ok:
		case porcupine.Illegal:
			out = append(out, Violation{"linearizable", key, fmt.Sprintf("no order of its %d operations fits a lease semaphore", len(part))})
		default:
			out = append(out, Violation{"linearizable", key, fmt.Sprintf("check of %d operations did not finish in %v", len(part), timeout)})
		}
	}
	return out
}

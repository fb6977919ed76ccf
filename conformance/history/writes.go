package history

import (
	"fmt"
	"slices"
	"time"
)

// Write is one write to a fenced resource as its writer saw it: the fence it carried, when it
// was invoked and returned, and whether the resource took it.
type Write struct {
	Resource string
	Holder   string
	Fence    uint64
	Call     time.Time
	Return   time.Time
	// Accepted says the resource took the write; Stale that it refused it for its fence. A write
	// that is neither failed otherwise (Err), and may or may not have landed.
	Accepted, Stale bool
	Err             error
}

// Tenure is how long a holder's work acted on a lease: from the grant's return (From) to when
// the work stopped (To): it saw the lease lost, or released it.
type Tenure struct {
	Key, Holder string
	Fence       uint64
	From, To    time.Time
}

// AddWrite records w.
func (r *Recorder) AddWrite(w Write) {
	r.mu.Lock()
	r.writes = append(r.writes, w)
	r.mu.Unlock()
}

// Writes returns a copy of the writes recorded, in the order they were added.
func (r *Recorder) Writes() []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes)
}

// AddTenure records t.
func (r *Recorder) AddTenure(t Tenure) {
	r.mu.Lock()
	r.tenures = append(r.tenures, t)
	r.mu.Unlock()
}

// Tenures returns a copy of the tenures recorded, in the order they were added.
func (r *Recorder) Tenures() []Tenure {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.tenures)
}

// WritesInFenceOrder checks, per resource, that no write landed out of fence order: an accepted
// write invoked after another accepted write had returned carries a fence no lower than that
// write's. A violation is a stale holder's write that the resource took after a newer holder's.
func WritesInFenceOrder(ws []Write) []Violation {
	var out []Violation
	by := map[string][]Write{}
	for _, w := range ws {
		if w.Accepted {
			by[w.Resource] = append(by[w.Resource], w)
		}
	}
	for res, acc := range by {
		byReturn := slices.Clone(acc)
		slices.SortFunc(byReturn, func(a, b Write) int { return a.Return.Compare(b.Return) })
		slices.SortFunc(acc, func(a, b Write) int { return a.Call.Compare(b.Call) })
		var top Write
		j := 0
		for _, w := range acc {
			for j < len(byReturn) && byReturn[j].Return.Before(w.Call) {
				if byReturn[j].Fence > top.Fence {
					top = byReturn[j]
				}
				j++
			}
			if w.Fence < top.Fence {
				out = append(out, Violation{"writes in fence order", res, fmt.Sprintf(
					"%s's write with fence %d was accepted after %s's with fence %d had returned", w.Holder, w.Fence, top.Holder, top.Fence)})
			}
		}
	}
	return out
}

// Refused returns how many writes the resources refused for a stale fence.
func Refused(ws []Write) int {
	n := 0
	for _, w := range ws {
		if w.Stale {
			n++
		}
	}
	return n
}

// Overlap returns, over every key, the longest time the tenures of two holders ran at once: how
// long a stale holder's work acted beside the next holder's (0 when none did).
func Overlap(ts []Tenure) time.Duration {
	var worst time.Duration
	for i, a := range ts {
		for _, b := range ts[i+1:] {
			if a.Key != b.Key || a.Holder == b.Holder {
				continue
			}
			if d := minTime(a.To, b.To).Sub(maxTime(a.From, b.From)); d > worst {
				worst = d
			}
		}
	}
	return worst
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

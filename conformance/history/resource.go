package history

import "sync"

// Resource is a fenced resource for tests: it accepts a write only with a fence no lower than
// the highest it has accepted (the fencing-token pattern), so a holder that lost its lease to a
// later one cannot write after it. Safe for concurrent use.
type Resource struct {
	mu       sync.Mutex
	highest  uint64
	accepted int
	refused  int
}

// Write reports whether a write with fence is accepted.
func (r *Resource) Write(fence uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fence < r.highest {
		r.refused++
		return false
	}
	r.highest = fence
	r.accepted++
	return true
}

// Counts returns how many writes were accepted and refused.
func (r *Resource) Counts() (accepted, refused int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted, r.refused
}

package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// A writer that took its intent and died (its intent is no longer refreshed) holds readers
// back only until the intent expires: a reader waiting behind it then reads, well within its
// acquire timeout, although the intent's expiry is announced on no key.
func TestRWMutexOverRedlockDeadWritersIntentExpires_review17(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	s := redlocks(t, ss, 2)
	ctx := context.Background()
	// The dead writer: an intent of 300ms that nobody refreshes.
	res, err := s[0].Acquire(ctx, core.AcquireRequest{Key: "rw\x00writer", Holder: "dead", Permits: 1, Limit: 1, TTL: 300 * time.Millisecond})
	if err != nil || !res.Granted {
		t.Fatalf("intent: %+v %v", res, err)
	}
	rd := scenario.MustRWMutex(t, s[1], "rw", primitives.WithRetryInterval(20*time.Millisecond), primitives.WithAcquireTimeout(5*time.Second))
	begin := time.Now()
	l, err := rd.AcquireRead(ctx)
	if err != nil {
		t.Fatalf("reader behind a dead writer's intent: %v", err)
	}
	defer l.Release(ctx)
	if took := time.Since(begin); took > 3*time.Second {
		t.Errorf("the reader took %v behind an intent of 300ms", took)
	}
}

// Two writers over Redlock with a node down: a writer and a reader never hold at once, and the
// terms of an Election's successive leaders grow, while the nodes' fences are out of step (one
// node wiped between rounds).
func TestRWMutexOverRedlockWipedNodeNoTwoHolders_review17(t *testing.T) {
	ns, ss := nodes(core.SystemClock{}, 3)
	s := redlocks(t, ss, 2)
	ctx := context.Background()
	a := scenario.MustRWMutex(t, s[0], "rw", primitives.WithRetryInterval(time.Millisecond))
	b := scenario.MustRWMutex(t, s[1], "rw", primitives.WithRetryInterval(time.Millisecond))
	var lastFence uint64
	for i := range 20 {
		ns[i%3].wipe()
		w, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if w.Fence() <= lastFence {
			t.Fatalf("round %d: writer's fence %d after %d", i, w.Fence(), lastFence)
		}
		lastFence = w.Fence()
		if r, err := b.TryAcquireRead(ctx); err == nil {
			r.Release(ctx)
			t.Fatalf("round %d: a reader got in while the writer holds", i)
		}
		w.Release(ctx)
		r, err := b.AcquireRead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if w, err := a.TryAcquire(ctx); err == nil {
			w.Release(ctx)
			t.Fatalf("round %d: a writer got in while a reader holds", i)
		}
		if r.Fence() <= lastFence {
			t.Fatalf("round %d: reader's fence %d after %d", i, r.Fence(), lastFence)
		}
		lastFence = r.Fence()
		r.Release(ctx)
	}
}

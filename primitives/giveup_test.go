package primitives_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// cancelAfterRefusal is a memory store whose Acquire, once armed, cancels the caller's ctx just
// after a refusal with a wait has taken a place in the line: the caller's ctx ends between its
// refused try and its Register, as it would for a client that hangs up at that moment.
type cancelAfterRefusal struct {
	*memory.Store
	cancel atomic.Pointer[context.CancelFunc]
}

func (s *cancelAfterRefusal) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	res, err := s.Store.Acquire(ctx, req)
	if err == nil && !res.Granted && req.Wait > 0 {
		if c := s.cancel.Swap(nil); c != nil {
			(*c)()
		}
	}
	return res, err
}

// TestCancelBeforeRegisterLeavesNoPlace: a caller whose ctx ends after its refused try
// took a place in the memory store's line, but before it enrolled (Register fails on the ended
// ctx), closes no waiter, so nothing takes its place out of the line. The holder's release then
// grants the lock, untaken, to that place: nobody holds it, yet a waiter behind must wait for
// the whole TTL of a grant that nobody will ever take.
func TestCancelBeforeRegisterLeavesNoPlace(t *testing.T) {
	store := &cancelAfterRefusal{Store: memory.New()}
	ctx := context.Background()
	ttl := 5 * time.Second
	holder := mustMutex(t, store, primitives.WithTTL(ttl))
	l := mustAcquire(t, holder)

	gone := mustMutex(t, store, primitives.WithTTL(ttl), primitives.WithAcquireTimeout(time.Minute))
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	store.cancel.Store(&cancel)
	if _, err := gone.Acquire(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire canceled after its refusal: %v, want Canceled", err)
	}

	mustRelease(t, l)
	// Nobody waits any more: the lock must be free for the next caller.
	next := mustMutex(t, store, primitives.WithTTL(ttl), primitives.WithAcquireTimeout(time.Second))
	start := time.Now()
	nl, err := next.Acquire(ctx)
	if err != nil {
		snap, _ := store.Inspect(ctx, "job")
		t.Fatalf("a free lock (nobody waits, the holder released) refused a caller for %v: %v; leases %+v",
			time.Since(start).Round(time.Millisecond), err, snap.Leases)
	}
	nl.Release(ctx)
}

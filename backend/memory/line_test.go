package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

func req(holder string, permits, limit int, wait time.Duration) core.AcquireRequest {
	return core.AcquireRequest{Key: "k", Holder: holder, Permits: permits, Limit: limit, TTL: time.Minute, Wait: wait}
}

func must(t *testing.T, s *memory.Store, r core.AcquireRequest, granted bool) core.AcquireResult {
	t.Helper()
	res, err := s.Acquire(context.Background(), r)
	if err != nil || res.Granted != granted {
		t.Fatalf("Acquire(%s) = %+v, %v; want granted %v", r.Holder, res, err, granted)
	}
	return res
}

// TestAdoptedGrantIsNotTakenBack: a lease the line granted to a waiter, untaken, is
// adopted (Semaphore.Adopt: an Extend by its holder id, "a lease held elsewhere"). The adopter
// holds it; the waiter then gives up (closes its waiter). Extend does not clear the untaken mark,
// so the waiter's leave deletes the adopted lease and grants the key to the next in line: two
// holders inside at once, the adopter's lease ended by someone else.
func TestAdoptedGrantIsNotTakenBack(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	a := must(t, s, req("a", 1, 1, 0), true)
	must(t, s, req("b", 1, 1, time.Minute), false)
	wb, err := s.Register(ctx, req("b", 1, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	must(t, s, req("c", 1, 1, time.Minute), false)
	wc, err := s.Register(ctx, req("c", 1, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a", Fence: a.Fence}); !ok || err != nil {
		t.Fatalf("release: %v, %v", ok, err)
	}
	<-wb.C() // b is granted the lease from the line, untaken
	m, _ := primitives.NewMutex(s, "k", primitives.WithTTL(time.Minute))
	adopted, err := m.Adopt(ctx, "b")
	if err != nil {
		t.Fatalf("adopt the line's grant: %v", err)
	}
	defer adopted.StopRefresh()
	wb.Close() // b's original caller gives up
	snap, _ := s.Inspect(ctx, "k")
	if held, _ := adopted.Held(ctx); !held {
		t.Fatalf("the adopted lease (fence %d) was ended by its former waiter's leave; leases now %+v", adopted.Fence(), snap.Leases)
	}
}

// TestLineOrderAndExtremes guards the strict FIFO and extreme input: a smaller request
// behind a large head is not served first, nor is a TryAcquire or a newcomer, and MaxDuration
// TTLs and waits with limits at MaxLimit grant and serve without overflow.
func TestLineOrderAndExtremes(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	const lim = core.MaxLimit
	big := func(h string, n int, wait time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: "k", Holder: h, Permits: n, Limit: lim, TTL: core.MaxDuration, Wait: wait}
	}
	a := must(t, s, big("a", lim-1, 0), true)
	must(t, s, big("head", 2, core.MaxDuration), false)  // needs 2, 1 free
	must(t, s, big("small", 1, core.MaxDuration), false) // 1 would fit: must not pass the head
	must(t, s, big("try", 1, 0), false)                  // a TryAcquire must not pass either
	if snap, _ := s.Inspect(ctx, "k"); snap.InUse() != lim-1 {
		t.Fatalf("in use %d, want %d: someone passed the head", snap.InUse(), lim-1)
	}
	w, _ := s.Register(ctx, big("head", 2, core.MaxDuration))
	defer w.Close()
	s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a", Fence: a.Fence})
	<-w.C()
	if r := must(t, s, big("head", 2, core.MaxDuration), true); r.Fence <= a.Fence {
		t.Fatalf("fence went back: %d after %d", r.Fence, a.Fence)
	}
	snap, _ := s.Inspect(ctx, "k")
	if snap.InUse() != 3 {
		t.Fatalf("after the release: %+v; want head (2) and small (1)", snap.Leases)
	}
	for _, l := range snap.Leases {
		if l.TTL <= 0 {
			t.Fatalf("lease with TTL MaxDuration reports TTL %v", l.TTL)
		}
	}
}

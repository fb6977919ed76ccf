package history_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance/history"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// workload runs workers on a Semaphore(limit) over st for d, each taking 1 or 2 permits and
// holding briefly, and returns the history.
func workload(t *testing.T, st core.Store, limit int, d time.Duration) []history.Op {
	var r history.Recorder
	rec := history.Record(st, &r)
	var wg sync.WaitGroup
	for w := range 6 {
		s, err := primitives.NewSemaphore(rec, fmt.Sprint("k", w%2), limit, primitives.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			end := time.Now().Add(d)
			for time.Now().Before(end) {
				l, err := s.Acquire(context.Background(), 1+w%2)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
				l.Release(context.Background())
			}
		})
	}
	wg.Wait()
	return r.Ops()
}

func TestMemoryStoreHistoryChecks(t *testing.T) {
	ops := workload(t, memory.New(), 3, 300*time.Millisecond)
	if len(ops) < 100 {
		t.Fatalf("only %d operations recorded", len(ops))
	}
	if v := history.Linearizable(ops, 30*time.Second); len(v) > 0 {
		t.Fatalf("a correct store's history: %v", v)
	}
	if v := history.FencesIncrease(ops); len(v) > 0 {
		t.Fatalf("a correct store's history: %v", v)
	}
	if v := history.Exclusive(ops); len(v) > 0 {
		t.Fatalf("a correct store's history: %v", v)
	}
	t.Logf("%d operations checked", len(ops))
}

// overGranting ignores the limit it is asked to keep, granting one more permit than that.
type overGranting struct{ core.Store }

func (s overGranting) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	req.Limit++
	return s.Store.Acquire(ctx, req)
}

// fenceReusing hands every new grant the fence of the first.
type fenceReusing struct {
	core.Store
	mu    sync.Mutex
	first uint64
}

func (s *fenceReusing) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	res, err := s.Store.Acquire(ctx, req)
	if err == nil && res.Granted {
		s.mu.Lock()
		if s.first == 0 {
			s.first = res.Fence
		}
		res.Fence = s.first
		s.mu.Unlock()
	}
	return res, err
}

// Release releases the holder's lease whatever fence it names: the fence the caller was told is
// not the store's. (Were the release refused, every lease would sit out its TTL, and the
// workload wait for it.)
func (s *fenceReusing) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	req.Fence = 0
	return s.Store.Release(ctx, req)
}

func TestCheckersCatchBrokenStores(t *testing.T) {
	ops := workload(t, overGranting{memory.New()}, 2, 300*time.Millisecond)
	if v := history.Linearizable(ops, 30*time.Second); len(v) == 0 {
		t.Error("a store granting over the limit passed the linearizability check")
	}
	if v := history.Exclusive(ops); len(v) == 0 {
		t.Error("a store granting over the limit passed the exclusion check")
	}
	ops = workload(t, &fenceReusing{Store: memory.New()}, 2, 200*time.Millisecond)
	if v := history.Linearizable(ops, 30*time.Second); len(v) == 0 {
		t.Error("a store reusing fences passed the linearizability check")
	}
	if v := history.FencesIncrease(ops); len(v) == 0 {
		t.Error("a store reusing fences passed the fence check")
	}
}

func TestResourceRefusesStaleFences(t *testing.T) {
	var r history.Resource
	for _, w := range []struct {
		fence    uint64
		accepted bool
	}{{fence: 5, accepted: true}, {fence: 5, accepted: true}, {fence: 7, accepted: true}, {fence: 6, accepted: false}} {
		if got := r.Write(w.fence); got != w.accepted {
			t.Fatalf("Write(%d) = %v; want 5, 5, 7 accepted in turn, then 6 refused", w.fence, got)
		}
	}
	if a, f := r.Counts(); a != 3 || f != 1 {
		t.Fatalf("counts %d, %d; want 3, 1", a, f)
	}
}

// TestCheckersAcceptGrantsMadeEarly: a holder granted again with its own fence, or granted by a
// call that failed and then found by a try, is no violation, though another holder's higher
// fence came between (limit 2).
func TestCheckersAcceptGrantsMadeEarly(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	op := func(holder string, call, ret int, ok bool, fence uint64, err error) history.Op {
		return history.Op{Kind: history.Acquire, Key: "k", Holder: holder, Permits: 1, Limit: 2, TTL: time.Minute,
			Call: at(call), Return: at(ret), OK: ok, Fence: fence, Err: err}
	}
	for name, ops := range map[string][]history.Op{
		"re-grant": {op("a", 0, 1, true, 10, nil), op("b", 2, 3, true, 11, nil), op("a", 4, 5, true, 10, nil)},
		"after a failed call": {op("a", 0, 1, false, 0, context.DeadlineExceeded), op("b", 2, 3, true, 11, nil),
			op("a", 4, 5, true, 10, nil)},
	} {
		if v := history.Linearizable(ops, time.Minute); len(v) > 0 {
			t.Errorf("%s: Linearizable: %v", name, v)
		}
		if v := history.FencesIncrease(ops); len(v) > 0 {
			t.Errorf("%s: FencesIncrease: %v", name, v)
		}
	}
	// A new holder granted a lower fence after a higher one returned is still caught.
	bad := []history.Op{op("a", 0, 1, true, 10, nil), op("b", 2, 3, true, 9, nil)}
	if len(history.Linearizable(bad, time.Minute)) == 0 || len(history.FencesIncrease(bad)) == 0 {
		t.Error("a fence going back was not caught")
	}
}

// TestExtendThatRevivesALeaseIsCaught: a lease extended after its TTL, while another holder's
// grant cannot have expired, means two holders at once (limit 1).
func TestExtendThatRevivesALeaseIsCaught(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ops := []history.Op{
		{Kind: history.Acquire, Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: 100 * time.Millisecond, Call: at(0), Return: at(1), OK: true, Fence: 10},
		{Kind: history.Acquire, Key: "k", Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute, Call: at(300), Return: at(301), OK: true, Fence: 11},
		{Kind: history.Extend, Key: "k", Holder: "a", TTL: 100 * time.Millisecond, Call: at(400), Return: at(401), OK: true, Fence: 10},
	}
	if len(history.Linearizable(ops, time.Minute)) == 0 {
		t.Error("an Extend that revived an expired lease beside another holder's was not caught")
	}
	if v := history.Linearizable(ops[:2], time.Minute); len(v) > 0 {
		t.Errorf("the same history without the Extend: %v", v)
	}
}

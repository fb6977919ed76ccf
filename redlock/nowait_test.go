package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

// waitRecorder is a node that records the Wait of every acquire-like call reaching it.
type waitRecorder struct {
	*memory.Store
	mu    sync.Mutex
	waits []time.Duration
}

func (w *waitRecorder) record(req core.AcquireRequest) {
	w.mu.Lock()
	w.waits = append(w.waits, req.Wait)
	w.mu.Unlock()
}

func (w *waitRecorder) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	w.record(req)
	return w.Store.Acquire(ctx, req)
}

func (w *waitRecorder) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	w.record(req)
	return w.Store.AcquireAbove(ctx, req, floor)
}

func (w *waitRecorder) RaiseFence(ctx context.Context, req core.AcquireRequest, fence uint64) (core.AcquireResult, error) {
	w.record(req)
	return w.Store.RaiseFence(ctx, req, fence)
}

// TestRefusalThatWillWaitTakesNoPlaceOnNodes: a refused acquire that will wait costs one round,
// sent with Wait = 0, so no node keeps a place for the caller in its line (the nodes' lines would
// each grant the freed permits to a different waiter); the key is free for anyone once released.
func TestRefusalThatWillWaitTakesNoPlaceOnNodes(t *testing.T) {
	ctx := context.Background()
	recs := []*waitRecorder{{Store: memory.New()}, {Store: memory.New()}, {Store: memory.New()}}
	s := mustNew(t, []core.Store{recs[0], recs[1], recs[2]})
	req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
		t.Fatalf("a: %+v, %v", res, err)
	}
	for _, r := range recs {
		r.mu.Lock()
		r.waits = nil
		r.mu.Unlock()
	}
	wait := core.AcquireRequest{Key: "k", Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	if res, err := s.Acquire(ctx, wait); err != nil || res.Granted {
		t.Fatalf("b, refused with a wait: %+v, %v", res, err)
	}
	for i, r := range recs {
		r.mu.Lock()
		waits := r.waits
		r.mu.Unlock()
		if len(waits) != 1 || waits[0] != 0 {
			t.Errorf("node %d saw acquires with waits %v, want one, with no wait", i, waits)
		}
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"}); err != nil || !ok {
		t.Fatalf("release a: %v, %v", ok, err)
	}
	for i, r := range recs {
		if snap, err := r.Inspect(ctx, "k"); err != nil || len(snap.Leases) != 0 {
			t.Errorf("node %d after the release: %+v, %v; want no lease (no line granted b)", i, snap, err)
		}
	}
	req.Holder = "c"
	if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
		t.Fatalf("c after the release: %+v, %v; want granted (nobody in the nodes' lines)", res, err)
	}
}

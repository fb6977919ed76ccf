package primitives_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Store that counts the calls reaching it and can inject faults.
type recorder struct {
	inner    *memory.Store
	acquires atomic.Int64
	extends  atomic.Int64
	releases atomic.Int64
	inspects atomic.Int64

	mu         sync.Mutex
	waits      []time.Duration          // the Wait of each Acquire, in order
	extendErr  error                    // returned by Extend instead of extending
	releaseErr error                    // returned by Release instead of releasing
	onAcquire  func(context.Context)    // runs before each Acquire reaches the store
	afterAcq   func(core.AcquireResult) // runs after
}

// notifying is a recorder that passes on the memory store's notifications.
type notifying struct{ *recorder }

func (n notifying) Register(ctx context.Context, req core.AcquireRequest) (core.Wake, error) {
	return n.inner.Register(ctx, req)
}

func newRecorder() *recorder { return &recorder{inner: memory.New()} }

func (r *recorder) calls() int64 {
	return r.acquires.Load() + r.extends.Load() + r.releases.Load() + r.inspects.Load()
}

func (r *recorder) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	r.acquires.Add(1)
	r.mu.Lock()
	r.waits = append(r.waits, req.Wait)
	before, after := r.onAcquire, r.afterAcq
	r.mu.Unlock()
	if before != nil {
		before(ctx)
	}
	res, err := r.inner.Acquire(context.WithoutCancel(ctx), req)
	if after != nil {
		after(res)
	}
	if err == nil && ctx.Err() != nil {
		return core.AcquireResult{}, ctx.Err() // the reply was lost as ctx ended
	}
	return res, err
}

func (r *recorder) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	r.extends.Add(1)
	r.mu.Lock()
	err := r.extendErr
	r.mu.Unlock()
	if err != nil {
		return core.ExtendResult{}, err
	}
	return r.inner.Extend(ctx, req)
}

func (r *recorder) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	r.releases.Add(1)
	r.mu.Lock()
	err := r.releaseErr
	r.mu.Unlock()
	if err != nil {
		return false, err
	}
	return r.inner.Release(ctx, req)
}

func (r *recorder) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	r.inspects.Add(1)
	return r.inner.Inspect(ctx, key)
}

// acquireWaits returns the Wait of every Acquire so far, in order.
func (r *recorder) acquireWaits() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.waits)
}

// failExtends makes every Extend return err instead of extending; nil ends the fault.
func (r *recorder) failExtends(err error) {
	r.mu.Lock()
	r.extendErr = err
	r.mu.Unlock()
}

// failReleases makes every Release return err instead of releasing; nil ends the fault.
func (r *recorder) failReleases(err error) {
	r.mu.Lock()
	r.releaseErr = err
	r.mu.Unlock()
}

var errNetwork = errors.New("network unreachable")

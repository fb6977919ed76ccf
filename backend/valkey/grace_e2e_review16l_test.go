package valkey_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
)

// TestCanceledCallsInBackgroundPipelineStressReview16l: many calls on a connection in
// valkey-go's background pipeline (where valkey-go asks the graceCtx for Done), their ctx
// canceled at random moments, a grace of 1 µs so that the grace's timer closes Done while
// valkey-go waits on it: every call returns, with nil or context.Canceled (never a nil error on
// abort, which would surface as a malformed reply), and under -race no data race.
func TestCanceledCallsInBackgroundPipelineStressReview16l(t *testing.T) {
	defer valkey.SetCancelGrace(time.Microsecond)()
	srv := redistest.StartServer(t)
	s := backgroundStore(t, srv.Addr, vk.ClientOption{})
	var wg sync.WaitGroup
	var ok, canceled atomic.Int32
	for w := range 8 {
		wg.Go(func() {
			key := fmt.Sprint("stress-", w)
			for range 100 {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(time.Duration(rand.IntN(300))*time.Microsecond, cancel)
				done := make(chan error, 1)
				go func() {
					req := core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
					res, err := s.Acquire(ctx, req)
					if err == nil && res.Granted {
						_, err = s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: res.Fence})
					}
					done <- err
				}()
				select {
				case err := <-done:
					if err == nil {
						ok.Add(1)
					} else if errors.Is(err, context.Canceled) {
						canceled.Add(1)
					} else {
						t.Errorf("a call canceled in the background pipeline: %v, want nil or Canceled", err)
					}
				case <-time.After(10 * time.Second):
					t.Error("a call canceled in the background pipeline has not returned in 10 s")
					return
				}
				cancel()
			}
		})
	}
	wg.Wait()
	t.Logf("%d pairs done, %d canceled", ok.Load(), canceled.Load())
}

// TestBackgroundCallsUnderLiveCustomCtxLeaveNothingReview16l: calls in valkey-go's background
// pipeline under a cancelable ctx that never ends and is not one of package context's (watched
// by a goroutine of context.AfterFunc's): once they return, no goroutine of theirs is left.
func TestBackgroundCallsUnderLiveCustomCtxLeaveNothingReview16l(t *testing.T) {
	srv := redistest.StartServer(t)
	s := backgroundStore(t, srv.Addr, vk.ClientOption{})
	ctx := &customCtx{Context: context.Background(), done: make(chan struct{})}
	req := core.AcquireRequest{Key: "custom", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
	if _, err := s.Acquire(ctx, req); err != nil { // the connection's goroutines are up
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	ignore := goleak.IgnoreCurrent()
	for range 50 {
		if _, err := s.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	goleak.VerifyNone(t, ignore)
}

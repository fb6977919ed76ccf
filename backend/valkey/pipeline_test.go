package valkey_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// backgroundStore returns a Store over a client of addr with one pipelined connection, that
// connection already switched to valkey-go's background pipeline (as any overlap of two calls on
// it does, for good), and a key acquired through it.
func backgroundStore(t *testing.T, addr string, opt vk.ClientOption) *valkey.Store {
	t.Helper()
	opt.PipelineMultiplex = -1
	c, s := clientAndStore(t, addr, opt)
	req := core.AcquireRequest{Key: "bg", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
	if _, err := s.Acquire(context.Background(), req); err != nil { // connection and library ready
		t.Fatal(err)
	}
	// A cancelable call with no deadline made on the client itself starts the background
	// pipeline of its connection (pipe.go:1160), which stays on.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	return s
}

// canceledReleaseReturns cancels, 20 ms after sending it, a Release against a server that has
// stopped answering, and fails t unless it returns within limit.
func canceledReleaseReturns(t *testing.T, s *valkey.Store, proxy *redistest.Proxy, limit time.Duration) {
	t.Helper()
	proxy.Hold(true)
	defer proxy.Hold(false)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := s.Release(ctx, core.ReleaseRequest{Key: "bg", Holder: "h"})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Release against a server that does not answer returned nil")
		}
		t.Logf("returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(limit):
		proxy.Hold(false)
		<-done
		t.Fatalf("a Release canceled after 20 ms against a server that does not answer had not returned in %v (ConnWriteTimeout 300 ms)", limit)
	}
}

// TestCanceledCallInBackgroundPipelineEnds: on a connection in valkey-go's background
// pipeline, a canceled call against a server that does not answer still ends, with the default
// keep-alive (valkey-go's background PING every Dialer.KeepAlive, failing after ConnWriteTimeout,
// ends the connection).
func TestCanceledCallInBackgroundPipelineEnds(t *testing.T) {
	testenv.SkipShort(t, "holds replies back in a fault proxy")
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	s := backgroundStore(t, proxy.Addr, vk.ClientOption{ConnWriteTimeout: 300 * time.Millisecond})
	canceledReleaseReturns(t, s, proxy, 10*time.Second)
}

// TestCanceledCallInBackgroundPipelineWithoutKeepAliveEnds: the same with TCP
// keep-alive off (Dialer.KeepAlive < 0, ConnWriteTimeout 300 ms): valkey-go then sends no
// background PING and sets no deadline on a pipelined connection, so only ctx can end the wait.
// A call sent as context.WithoutCancel(ctx) waited for as long as the server stayed silent; it
// ends cancelGrace (here 500 ms) after ctx.
func TestCanceledCallInBackgroundPipelineWithoutKeepAliveEnds(t *testing.T) {
	testenv.SkipShort(t, "holds replies back in a fault proxy")
	defer valkey.SetCancelGrace(500 * time.Millisecond)()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	s := backgroundStore(t, proxy.Addr, vk.ClientOption{ConnWriteTimeout: 300 * time.Millisecond,
		Dialer: net.Dialer{KeepAlive: -1}})
	canceledReleaseReturns(t, s, proxy, 10*time.Second)
}

// TestCancelableCallWorksWithoutWriteTimeout: a call whose ctx can be canceled but has no
// deadline, on a client with no ConnWriteTimeout (negative) and so a connection deadline that is
// the call's own, works: the far deadline it is sent with is one the conn can take.
func TestCancelableCallWorksWithoutWriteTimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := storeVia(t, srv.Addr, vk.ClientOption{ConnWriteTimeout: -1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := core.AcquireRequest{Key: "no-write-timeout", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
	for range 3 {
		res, err := s.Acquire(ctx, req)
		if err != nil || !res.Granted {
			t.Fatalf("Acquire = %+v, %v", res, err)
		}
		if held, err := s.Release(ctx, core.ReleaseRequest{Key: req.Key, Holder: "h", Fence: res.Fence}); err != nil || !held {
			t.Fatalf("Release = %v, %v", held, err)
		}
	}
}

// TestCanceledReleaseInBackgroundPipelineReportsWhatTheServerDid: on a connection in
// valkey-go's background pipeline, a Release canceled while its script is on the wire still
// reports the reply (released) when the reply comes within cancelGrace.
func TestCanceledReleaseInBackgroundPipelineReportsWhatTheServerDid(t *testing.T) {
	testenv.SkipShort(t, "delays replies through a fault proxy")
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	s := backgroundStore(t, proxy.Addr, vk.ClientOption{})
	res, err := s.Acquire(context.Background(), core.AcquireRequest{Key: "bg2", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
	if err != nil || !res.Granted {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	proxy.SetLatency(200 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(50*time.Millisecond, cancel)
	held, err := s.Release(ctx, core.ReleaseRequest{Key: "bg2", Holder: "h", Fence: res.Fence})
	if err != nil || !held {
		t.Errorf("Release canceled in flight = %v, %v; want true, nil (what the reply says)", held, err)
	}
	proxy.SetLatency(0)
}

// TestCancelableCallStaysSynchronous: calls whose ctx can be canceled but has no
// deadline leave an idle connection out of valkey-go's background pipeline (the point of
// b18f66f): with keep-alive off there, a canceled call to a silent server ends by the
// synchronous call's ConnWriteTimeout (300 ms), not by the 10 s cancelGrace that bounds a
// pipelined one.
func TestCancelableCallStaysSynchronous(t *testing.T) {
	testenv.SkipShort(t, "holds replies back in a fault proxy")
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	s := storeVia(t, proxy.Addr, vk.ClientOption{PipelineMultiplex: -1, ConnWriteTimeout: 300 * time.Millisecond,
		Dialer: net.Dialer{KeepAlive: -1}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := core.AcquireRequest{Key: "bg", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
	for range 3 {
		if _, err := s.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	canceledReleaseReturns(t, s, proxy, 9*time.Second)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the canceled Release took %v: it went through the background pipeline", d)
	}
}

// TestCanceledCallsInBackgroundPipelineAllReturn: many calls on a connection in
// valkey-go's background pipeline (where valkey-go asks the graceCtx for Done), their ctx
// canceled at random moments, a grace of 1 µs so that the grace's timer closes Done while
// valkey-go waits on it: every call returns, with nil or context.Canceled (never a nil error on
// abort, which would surface as a malformed reply), and under -race no data race.
func TestCanceledCallsInBackgroundPipelineAllReturn(t *testing.T) {
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

// TestBackgroundCallsUnderLiveCustomCtxLeaveNothing: calls in valkey-go's background
// pipeline under a cancelable ctx that never ends and is not one of package context's (watched
// by a goroutine of context.AfterFunc's): once they return, no goroutine of theirs is left.
func TestBackgroundCallsUnderLiveCustomCtxLeaveNothing(t *testing.T) {
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

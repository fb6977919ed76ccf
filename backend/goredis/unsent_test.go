package goredis_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// TestScriptCallWhoseDialFailedIsSentAgain: a script call that never left the client because
// every dial go-redis made for it failed (go-redis's own dial retries included; it does not
// send such a call again itself) is made again by the Store, and goes through once a dial
// succeeds: the server runs it once.
func TestScriptCallWhoseDialFailedIsSentAgain(t *testing.T) {
	srv := redistest.StartServer(t)
	px := redistest.StartProxy(t, srv.Addr)
	var refuse atomic.Int32 // dials still to fail
	var dials atomic.Int32
	dialer := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		if refuse.Add(-1) >= 0 {
			return nil, &net.OpError{Op: "dial", Net: network, Err: errRefused}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	client := redis.NewClient(&redis.Options{Addr: px.Addr, Dialer: dialer, PoolSize: 4,
		DialerRetries: 2, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { client.Close() })
	s, err := goredis.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	if _, err := s.Inspect(ctx, "warm-up"); err != nil { // the library loaded
		t.Fatal(err)
	}
	// The pooled connection cut: the next call dials, and go-redis's two dials for it fail.
	px.Cut()
	refuse.Store(2)
	before, d0 := fcalls(t, srv.Addr), dials.Load()
	res, err := s.Acquire(ctx, core.AcquireRequest{Key: "dial", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
	if err != nil || !res.Granted {
		t.Fatalf("Acquire whose first dials failed = %+v, %v; want granted (sent again)", res, err)
	}
	if n := dials.Load() - d0; n < 3 {
		t.Errorf("%d dials; want the two that failed, then one that went through", n)
	}
	if ran := fcalls(t, srv.Addr) - before; ran != 1 {
		t.Errorf("the server ran %d FCALLs, want 1", ran)
	}
}

// errRefused stands for a refused connection.
var errRefused = &net.AddrError{Err: "connection refused (test)"}

// poolTimeouts is a go-redis hook that reports each command that found no connection free in
// the pool in time (redis.ErrPoolTimeout), and leaves commands alone.
type poolTimeouts struct{ c chan struct{} }

func (h poolTimeouts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h poolTimeouts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h poolTimeouts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if errors.Is(err, redis.ErrPoolTimeout) {
			select {
			case h.c <- struct{}{}:
			default:
			}
		}
		return err
	}
}

// TestScriptCallThatFoundThePoolExhaustedIsSentOnceAConnectionFrees: a script call that found
// every pooled connection busy past the client's PoolTimeout never left the client; the Store
// makes it again, and it goes through once a connection is free: the server runs it once.
func TestScriptCallThatFoundThePoolExhaustedIsSentOnceAConnectionFrees(t *testing.T) {
	srv := redistest.StartServer(t)
	px := redistest.StartProxy(t, srv.Addr)
	timedOut := poolTimeouts{make(chan struct{}, 1)}
	client := redis.NewClient(&redis.Options{Addr: px.Addr, PoolSize: 1, PoolTimeout: 20 * time.Millisecond})
	client.AddHook(timedOut)
	t.Cleanup(func() { client.Close() })
	s, err := goredis.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	if _, err := s.Inspect(ctx, "warm-up"); err != nil { // the library loaded
		t.Fatal(err)
	}
	// The pool's one connection is busy with a PING whose request the proxy holds.
	arrived, deliver := px.HoldRequest("ping")
	defer deliver()
	pinged := make(chan error, 1)
	go func() { pinged <- client.Ping(ctx).Err() }()
	<-arrived
	before := fcalls(t, srv.Addr)
	got := make(chan error, 1)
	go func() {
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: "pool", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
		if err == nil && !res.Granted {
			err = errors.New("refused")
		}
		got <- err
	}()
	<-timedOut.c // the Acquire's first send found no connection
	deliver()
	if err := <-pinged; err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Acquire that first found the pool exhausted: %v; want granted (sent again)", err)
	}
	if ran := fcalls(t, srv.Addr) - before; ran != 1 {
		t.Errorf("the server ran %d FCALLs, want 1", ran)
	}
}

package valkey_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// lostReplyClient runs every command on the server, but while failNext is set it answers the next
// script call (FCALL, EVALSHA, EVAL) with context.DeadlineExceeded after the server ran it: what
// valkey-go's syncDo returns when the call's own deadline strikes the read of its reply
// (pipe.go:1501-1502 converts the conn's timeout to context.DeadlineExceeded).
type lostReplyClient struct {
	vk.Client
	failNext atomic.Bool
	scripts  atomic.Int32
}

func (c *lostReplyClient) Do(ctx context.Context, cmd vk.Completed) vk.ValkeyResult {
	switch strings.ToUpper(cmd.Commands()[0]) {
	case "FCALL", "EVALSHA", "EVAL":
		c.scripts.Add(1)
		if c.failNext.CompareAndSwap(true, false) {
			c.Client.Do(context.Background(), cmd) // it reached the server and ran
			expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			defer cancel()
			return c.Client.Do(expired, c.Client.B().Ping().Build()) // context.DeadlineExceeded
		}
		// A retry that reaches a live connection (the background writer of a pipelined one
		// sends it whatever the ctx's deadline) runs.
		return c.Client.Do(context.Background(), cmd)
	}
	return c.Client.Do(ctx, cmd)
}

// lateCtx is a ctx whose deadline has passed but whose timer has not fired yet: Err is still nil.
// context.WithDeadline sets Err from a time.AfterFunc goroutine, which can run after the
// goroutine woken by the conn's deadline at the same instant has already seen its error.
type lateCtx struct {
	context.Context
	dl time.Time
}

func (c lateCtx) Deadline() (time.Time, bool) { return c.dl, true }

// TestOwnDeadlineAfterSendIsNotRetried: a script call whose reply its own deadline cut off may
// have run; Run must not make it again even while ctx.Err() is still nil. Before the fix the
// Release ran twice and reported a lease it had just released as not held.
func TestOwnDeadlineAfterSendIsNotRetried(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := &lostReplyClient{Client: newClient(t, srv.Addr, vk.ClientOption{})}
	s := storeOver(t, c)
	req := core.AcquireRequest{Key: "own-deadline", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
	if res, err := s.Acquire(context.Background(), req); err != nil || !res.Granted {
		t.Fatalf("Acquire: %+v, %v", res, err)
	}
	c.scripts.Store(0)
	c.failNext.Store(true)
	ctx := lateCtx{Context: context.Background(), dl: time.Now().Add(-time.Millisecond)}
	held, err := s.Release(ctx, core.ReleaseRequest{Key: "own-deadline", Holder: "h"})
	if n := c.scripts.Load(); n != 1 {
		t.Errorf("Release sent its script %d times, want 1 (its own deadline ended the first)", n)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Release = %v, %v; want context.DeadlineExceeded", held, err)
	}
}

// failingClient answers every script call (FCALL, EVALSHA, EVAL) with err, sending nothing.
type failingClient struct {
	vk.Client
	err error
}

func (c failingClient) Do(ctx context.Context, cmd vk.Completed) vk.ValkeyResult {
	switch strings.ToUpper(cmd.Commands()[0]) {
	case "FCALL", "EVALSHA", "EVAL":
		return vk.NewErrorResult(c.err)
	}
	return c.Client.Do(ctx, cmd)
}

// TestDialCutByOwnDeadlineReportsTheDeadline: a call whose dial its own deadline cut off reports
// context.DeadlineExceeded (with the dial's words), even when net's dial returned its poller's
// "i/o timeout" before ctx's timer set Err: a caller that gave its Acquire a deadline is told
// that the deadline ended it, as with every other cut of its call. Before the fix the Acquire
// returned the bare dial error (a busy-key handoff test failed on it in CI, one run).
func TestDialCutByOwnDeadlineReportsTheDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	real := newClient(t, srv.Addr, vk.ClientOption{})
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	if errors.Is(dialErr, context.DeadlineExceeded) {
		t.Fatal("the premise is gone: net's poller timeout now matches context.DeadlineExceeded")
	}
	s := storeOver(t, failingClient{Client: real, err: dialErr})
	ctx := lateCtx{Context: context.Background(), dl: time.Now().Add(-time.Millisecond)}
	_, err := s.Acquire(ctx, core.AcquireRequest{Key: "dial-deadline", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire whose dial its own deadline cut = %v; want an error matching context.DeadlineExceeded", err)
	}
	if err == nil || !strings.Contains(err.Error(), "dial tcp") {
		t.Errorf("Acquire's error %v does not say the dial failed", err)
	}
}

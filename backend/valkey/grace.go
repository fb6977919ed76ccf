package valkey

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// graceCtx is the ctx Do sends a call under when the caller's ctx can be canceled but has no
// deadline: one with a deadline that never comes, whose Done closes defaultCancelGrace after the
// caller's ctx ends. valkey-go sends a call with a deadline synchronously while its connection is
// idle, bounded by ConnWriteTimeout instead of the deadline (a call that can be canceled and has
// no deadline it always sends through the connection's background pipeline, two goroutine
// hand-offs more), and through the background pipeline otherwise, where Done ends the wait. So
// the call's reply, which reports what the server did, is waited for after the caller's ctx ends,
// but not forever: sent without cancel, a call in the background pipeline waited for a server
// that no longer answers as long as valkey-go's background PING let it, forever with
// Dialer.KeepAlive < 0, where valkey-go neither pings nor sets a deadline on the connection.
//
// Done's channel, and the watch of the caller's ctx behind it, are made only when asked for (the
// synchronous path never asks), so the usual call costs one allocation. Value is the caller's.
type graceCtx struct {
	context.Context // the caller's

	mu     sync.Mutex
	done   chan struct{} // made by Done
	stop   func() bool   // ends the watch of the caller's ctx that Done set up
	timer  *time.Timer   // closes done, from the end of the caller's ctx
	closed bool          // done is closed
	over   bool          // Run has returned: nothing more to start
}

// never is graceCtx's deadline: past any ConnWriteTimeout, which valkey-go applies instead on
// a synchronous call (pipe.go syncDo), and far from the end of time.Time's range.
var never = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// Deadline reports a deadline that never comes.
func (g *graceCtx) Deadline() (time.Time, bool) { return never, true }

// Done returns a channel closed the grace after the caller's ctx ends, or after Done is first
// asked if that is later (the end of ctx is seen only from then on: a call that Run makes after
// a synchronous one outlived ctx gets its whole grace); never, if Run has returned before it was
// asked for. Until Done is asked, Err is nil whenever ctx ended: such a call is still sent.
func (g *graceCtx) Done() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done == nil {
		g.done = make(chan struct{})
		if !g.over {
			g.stop = context.AfterFunc(g.Context, g.ctxEnded)
		}
	}
	return g.done
}

// ctxEnded starts the grace.
func (g *graceCtx) ctxEnded() {
	grace := defaultCancelGrace
	if d := cancelGrace.Load(); d > 0 {
		grace = time.Duration(d)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.over {
		g.timer = time.AfterFunc(grace, g.expire)
	}
}

// expire closes done.
func (g *graceCtx) expire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		close(g.done)
	}
}

// Err is the caller's ctx's error once done is closed, and nil before.
func (g *graceCtx) Err() error {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if !closed {
		return nil
	}
	if err := g.Context.Err(); err != nil {
		return err
	}
	return context.Canceled
}

// end stops the watch and the grace's timer: Run has returned.
func (g *graceCtx) end() {
	g.mu.Lock()
	g.over = true
	stop, timer := g.stop, g.timer
	g.mu.Unlock()
	if stop != nil {
		stop()
	}
	if timer != nil {
		timer.Stop()
	}
}

// defaultCancelGrace is how long after its ctx ends Run still waits for a call's reply (see
// graceCtx): valkey-go's default ConnWriteTimeout.
const defaultCancelGrace = 10 * time.Second

// cancelGrace, when positive, replaces defaultCancelGrace (in ns): for tests.
var cancelGrace atomic.Int64

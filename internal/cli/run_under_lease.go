package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/supervise"
)

// leaseRun is one run of a command under a lease, by run or elect, from the grant to the release.
type leaseRun struct {
	cfg            runConfig
	stdout, stderr io.Writer
	sigs           chan os.Signal // the signals of supervise.Forwarded that came, for the command
	lease          heldLease
	stop           supervise.Stop // the command's stop, as last scheduled after a grant or a refresh
	stopping       bool           // the command has been told to stop: run exits exitLost
}

// runUnderLease takes the lease (cfg.acquire), runs the command under it, and returns the exit
// status of run or elect.
func runUnderLease(ctx context.Context, cfg runConfig, stdout, stderr io.Writer) int {
	stdout, stderr = lockedOutput(stdout, stderr)
	r := &leaseRun{cfg: cfg, stdout: stdout, stderr: stderr, sigs: make(chan os.Signal, 8)}
	signal.Notify(r.sigs, supervise.Forwarded...)
	defer signal.Stop(r.sigs)
	// Until the command starts, any of those signals ends the wait; one that comes as the lease
	// is granted releases it unused. Once the command has started, they go to the command.
	wctx, stopWaiting := signal.NotifyContext(ctx, supervise.Forwarded...)
	defer stopWaiting()

	store, closeStore, err := cfg.store.connect(wctx, cfg.name, stderr, cfg.limit)
	if err != nil {
		if wctx.Err() != nil {
			return r.interrupted()
		}
		r.say("%v", err)
		return exitFail
	}
	defer closeStore()
	r.cfg.refreshed, r.cfg.abandoned = make(chan struct{}, 1), make(chan core.ReleaseRequest, max(1, len(cfg.keys)))
	r.cfg.refused = new(atomic.Pointer[string])
	lease, err := r.cfg.acquire(wctx, store)
	interruptedWaiting := wctx.Err() != nil // before stopWaiting, which cancels wctx
	stopWaiting()
	if err != nil {
		return r.notAcquired(ctx, store, err, interruptedWaiting)
	}
	r.lease = lease
	c, code := r.start(ctx, interruptedWaiting)
	if c == nil {
		return code
	}
	return r.follow(ctx, c)
}

// say writes one line on stderr: "leasehold run: " (or elect), then format with args.
func (r *leaseRun) say(format string, args ...any) {
	fmt.Fprintf(r.stderr, "leasehold %s: %s\n", r.cfg.name, fmt.Sprintf(format, args...))
}

// interrupted says that a signal ended the wait for the lease, and returns exitInterrupted.
func (r *leaseRun) interrupted() int {
	r.say("interrupted while waiting for %s; nothing acquired", r.cfg.keysText())
	return exitInterrupted
}

// start starts the command under the lease with its schedule of stops, and returns it; or, when
// a signal came as the lease was granted, the lease is lost already, or the command cannot be
// started, releases the lease, says why, and returns nil and run's exit status.
func (r *leaseRun) start(ctx context.Context, interruptedWaiting bool) (*supervise.Child, int) {
	// A signal that came as the lease was granted, before the command started, is an interrupt
	// before the command started: the command is not started at all.
	if interruptedWaiting || len(r.sigs) > 0 {
		r.release(ctx)
		r.say("interrupted as %s was granted; released, the command not started", r.cfg.keysText())
		return nil, exitInterrupted
	}
	// A lease lost between its grant and here is never run under.
	if err := r.lease.Err(); err != nil {
		r.say("%v; the command not started", err)
		return nil, exitLost
	}
	env := append(os.Environ(), leaseEnv(r.lease)...)
	r.stop = r.cfg.stopAt(r.lease.Deadline())
	c, err := supervise.Start(r.cfg.command, env, supervise.Stdio{In: os.Stdin, Out: r.stdout, Err: r.stderr}, r.stop)
	if err != nil {
		r.release(ctx)
		r.say("%v", err)
		return nil, exitCannotStart
	}
	return c, 0
}

// follow passes the signals of supervise.Forwarded on to the command c and keeps its stop with the lease
// until it ends: later after each refresh, sooner when the lease is lost. It returns run's exit
// status once c has ended and the lease is released.
func (r *leaseRun) follow(ctx context.Context, c *supervise.Child) int {
	lost := r.lease.Done()
	for {
		select {
		case s := <-r.sigs:
			c.Signal(s.(syscall.Signal))
		case <-r.cfg.refreshed:
			r.renewed(c)
		case <-lost:
			lost = nil
			r.lost(c)
		case s := <-c.Stops():
			r.stopped(s)
		case <-c.Done():
			return r.ended(ctx, c, lost == nil)
		}
	}
}

// renewed moves the command's stop after the lease's new deadline, unless it is stopping.
func (r *leaseRun) renewed(c *supervise.Child) {
	if d := r.lease.Deadline(); !r.stopping && d.After(r.stop.Deadline) {
		r.stop = r.cfg.stopAt(d)
		c.Schedule(r.stop)
	}
}

// lost stops the command, lost before it was told to stop (the store no longer holds it, say):
// SIGTERM now, SIGKILL after -grace, and no later than planned.
func (r *leaseRun) lost(c *supervise.Child) {
	if r.stopping {
		return
	}
	r.stopping = true
	now := time.Now()
	if k := now.Add(r.cfg.graceOrDefault()); k.Before(r.stop.Kill) {
		r.stop.Kill = k
	}
	if left := r.stop.Kill.Sub(now); left > 0 {
		r.say("%v; stopping the command: SIGTERM, SIGKILL after %v", r.lease.Err(), left.Round(time.Millisecond))
	} else {
		r.say("%v; stopping the command: SIGKILL", r.lease.Err())
	}
	c.Schedule(supervise.Stop{Term: now, Kill: r.stop.Kill, Deadline: r.stop.Deadline})
}

// stopped says that the command got sig on schedule, the lease not renewed in time.
func (r *leaseRun) stopped(sig syscall.Signal) {
	switch sig {
	case syscall.SIGTERM:
		if !r.stopping {
			r.stopping = true
			r.say("the lease on %q was not renewed in time; stopping the command: SIGTERM, SIGKILL after -grace %v, %v before its deadline",
				r.cfg.dueKey(r.lease), r.cfg.graceOrDefault(), r.cfg.stopMargin())
		}
	case syscall.SIGKILL:
		r.stopping = true
		r.say("the command outlived -grace %v; SIGKILL", r.cfg.graceOrDefault())
	}
}

// ended releases the lease once the command c has ended, and returns run's exit status: the
// command's, or exitLost if it was stopped or the lease was lost.
func (r *leaseRun) ended(ctx context.Context, c *supervise.Child, lost bool) int {
	status := c.Wait()
	if !r.stopping && !time.Now().Before(r.stop.Term) {
		// Past the stop time with no renewal: the supervisor's own switch may have stopped the
		// command before its report of the SIGTERM reached run.
		r.stopping = true
		r.say("the lease on %q was not renewed in time; the command was stopped: SIGTERM, SIGKILL after -grace %v, %v before its deadline",
			r.cfg.dueKey(r.lease), r.cfg.graceOrDefault(), r.cfg.stopMargin())
	}
	r.release(ctx)
	if r.stopping || lost {
		return exitLost
	}
	return status
}

// release gives the lease back, within 5s, tried twice when no reply came, and says why if that
// failed (a loss aside: run reports it otherwise).
func (r *leaseRun) release(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := r.lease.Release(rctx)
	if err != nil && !errors.Is(err, core.ErrLost) && rctx.Err() == nil {
		// No reply (the call is sent once): the release may not have gone through. Once more: a
		// release that did go through is then reported as one, not as a loss.
		err = r.lease.Release(rctx)
	}
	if err != nil && !errors.Is(err, core.ErrLost) {
		r.say("%v", err)
	}
}

// lockedOutput returns stdout and stderr for run's lines and the command's output, which os/exec
// copies on goroutines of its own when they are not files: stderr, unless a file, written by one
// writer at a time, and stdout too when it is the same writer.
func lockedOutput(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	if _, ok := stderr.(*os.File); ok {
		return stdout, stderr
	}
	locked := &lockedWriter{w: stderr}
	if t := reflect.TypeOf(stdout); t != nil && t == reflect.TypeOf(stderr) && t.Comparable() && stdout == stderr {
		return locked, locked
	}
	return stdout, locked
}

// lockedWriter is w, written by one writer at a time.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

//go:build !linux

package supervise

import (
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Child is a command started by Start. On this system it is a plain child process: signals reach
// it alone, not what it starts; the CLI's own timers stop it on schedule, so if the CLI is
// stopped (SIGSTOP) or stalled nothing stops it, and if the CLI is killed with SIGKILL the
// command runs on without the lease. Only Linux has the supervised process group.
type Child struct {
	cmd     *exec.Cmd
	ended   chan struct{}       // closed when the command has ended and been waited for
	err     error               // how it ended, once ended is closed
	stopped chan syscall.Signal // the signals sent on schedule

	mu         sync.Mutex
	term, kill *time.Timer
	termAt     time.Time
	termed     bool
	killAt     time.Time
}

// Start starts command with env, and stops it at stop unless told a later time (Schedule). It
// returns an error if the command could not be started. Wait must be called once Done is
// closed: it stops the timers.
func Start(command, env []string, std Stdio, stop Stop) (*Child, error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, std.In, std.Out, std.Err
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Child{cmd: cmd, ended: make(chan struct{}), stopped: make(chan syscall.Signal, 4)}
	c.mu.Lock()
	c.termAt, c.killAt = stop.Term, stop.Kill
	c.term = time.AfterFunc(time.Until(stop.Term), c.fire)
	c.kill = time.AfterFunc(time.Until(stop.Kill), c.fire)
	c.mu.Unlock()
	go func() {
		defer close(c.ended)
		c.err = cmd.Wait()
	}()
	return c, nil
}

// fire sends the signals whose time has come: SIGTERM, then SIGKILL.
func (c *Child) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if !c.termed && !now.Before(c.termAt) {
		c.termed = true
		c.cmd.Process.Signal(syscall.SIGTERM)
		c.report(syscall.SIGTERM)
	}
	if c.termed && !now.Before(c.killAt) {
		c.cmd.Process.Kill()
		c.report(syscall.SIGKILL)
	}
}

// report tells Stops that sig was sent, without blocking.
func (c *Child) report(sig syscall.Signal) {
	select {
	case c.stopped <- sig:
	default:
	}
}

// Schedule sets a new stop: any, until SIGTERM has been sent; after that, an earlier kill time
// only.
func (c *Child) Schedule(stop Stop) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.termed {
		if !stop.Kill.Before(c.killAt) {
			return
		}
	} else {
		c.termAt = stop.Term
		c.term.Reset(time.Until(stop.Term))
	}
	c.killAt = stop.Kill
	c.kill.Reset(time.Until(stop.Kill))
}

// Stops reports the signals sent on schedule: SIGTERM, then SIGKILL. A report that finds the
// channel full is dropped.
func (c *Child) Stops() <-chan syscall.Signal { return c.stopped }

// Signal sends sig to the command.
func (c *Child) Signal(sig syscall.Signal) {
	c.cmd.Process.Signal(sig)
}

// Done is closed when the command has ended.
func (c *Child) Done() <-chan struct{} { return c.ended }

// Wait waits until Done is closed, stops the timers, and returns the command's exit status as a
// shell reports it: its own, 128+N if signal N ended it, 1 if that is unknown.
func (c *Child) Wait() int {
	<-c.ended
	c.mu.Lock()
	c.term.Stop()
	c.kill.Stop()
	c.mu.Unlock()
	return exitStatus(c.err)
}

// GroupNote is what --help says of the command's process group on this system.
const GroupNote = `On this system the command is a plain child process, and leasehold's own timers stop it: signals,
and the stop when the lease is not renewed, reach it alone, not what it started; if leasehold is
stopped (SIGSTOP) or stalls, nothing stops the command on time; if leasehold is killed with
SIGKILL, the command runs on without the lease. (On Linux it runs in a supervised process group
whose supervisor keeps the stop's schedule on its own, and dies with leasehold.)`

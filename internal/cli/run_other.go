//go:build !linux

package cli

import (
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// child is a command started by `leasehold run`. On this system it is a plain child process:
// signals reach it alone, not what it starts; the CLI's own timers stop it on schedule, so if
// leasehold is stopped (SIGSTOP) or stalled nothing stops it, and if leasehold is killed with
// SIGKILL the command runs on without the lease. Only Linux has the supervised process group.
type child struct {
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

// startChild starts command with env, and stops it at stop unless told a later time (schedule).
func startChild(command, env []string, std stdio, stop stopAt) (*child, error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, std.in, std.out, std.err
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, ended: make(chan struct{}), stopped: make(chan syscall.Signal, 4)}
	c.mu.Lock()
	c.termAt, c.killAt = stop.term, stop.kill
	c.term = time.AfterFunc(time.Until(stop.term), c.fire)
	c.kill = time.AfterFunc(time.Until(stop.kill), c.fire)
	c.mu.Unlock()
	go func() {
		defer close(c.ended)
		c.err = cmd.Wait()
	}()
	return c, nil
}

// fire sends the signals whose time has come: SIGTERM, then SIGKILL.
func (c *child) fire() {
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

// report tells stops that sig was sent, without blocking.
func (c *child) report(sig syscall.Signal) {
	select {
	case c.stopped <- sig:
	default:
	}
}

// schedule sets a new stop: any, until SIGTERM has been sent; after that, an earlier kill time
// only.
func (c *child) schedule(stop stopAt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.termed {
		if !stop.kill.Before(c.killAt) {
			return
		}
	} else {
		c.termAt = stop.term
		c.term.Reset(time.Until(stop.term))
	}
	c.killAt = stop.kill
	c.kill.Reset(time.Until(stop.kill))
}

// stops reports the signals sent on schedule: SIGTERM, then SIGKILL.
func (c *child) stops() <-chan syscall.Signal { return c.stopped }

// signal sends sig to the command.
func (c *child) signal(sig syscall.Signal) {
	c.cmd.Process.Signal(sig)
}

// done is closed when the command has ended.
func (c *child) done() <-chan struct{} { return c.ended }

// wait returns how the command ended, once done is closed.
func (c *child) wait() error {
	<-c.ended
	c.mu.Lock()
	c.term.Stop()
	c.kill.Stop()
	c.mu.Unlock()
	return c.err
}

// processGroupNote is what --help says of the command's process group on this system.
const processGroupNote = `On this system the command is a plain child process, and leasehold's own timers stop it: signals,
and the stop when the lease is not renewed, reach it alone, not what it started; if leasehold is
stopped (SIGSTOP) or stalls, nothing stops the command on time; if leasehold is killed with
SIGKILL, the command runs on without the lease. (On Linux it runs in a supervised process group
whose supervisor keeps the stop's schedule on its own, and dies with leasehold.)`

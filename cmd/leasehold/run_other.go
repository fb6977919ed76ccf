//go:build !linux

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// forwarded are the signals `leasehold run` passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// child is a command started by `leasehold run`. On this system it is a plain child process:
// signals reach it alone, not what it starts, and if leasehold is killed with SIGKILL the
// command runs on without the lease. Only Linux has the supervised process group.
type child struct {
	cmd   *exec.Cmd
	ended chan struct{} // closed when the command has ended and been waited for
	err   error         // how it ended, once ended is closed
}

// startChild starts command with env.
func startChild(command, env []string, std stdio) (*child, error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, std.in, std.out, std.err
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, ended: make(chan struct{})}
	go func() {
		defer close(c.ended)
		c.err = cmd.Wait()
	}()
	return c, nil
}

// signal sends sig to the command.
func (c *child) signal(sig syscall.Signal) {
	c.cmd.Process.Signal(sig)
}

// kill sends SIGKILL to the command.
func (c *child) kill() {
	c.cmd.Process.Kill()
}

// done is closed when the command has ended.
func (c *child) done() <-chan struct{} { return c.ended }

// wait returns how the command ended, once done is closed.
func (c *child) wait() error {
	<-c.ended
	return c.err
}

// processGroupNote is what --help says of the command's process group on this system.
const processGroupNote = `On this system the command is a plain child process: signals, and the stop when the lease
is lost, reach it alone, not what it started; if leasehold is killed with SIGKILL, the command
runs on without the lease. (On Linux it runs in a supervised process group that dies with
leasehold.)`

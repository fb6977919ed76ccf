package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// Exit statuses of `leasehold run` besides the command's own.
const (
	exitBusy        = 3   // the key was busy: -n, or -wait ran out; nothing acquired
	exitLost        = 75  // the lease was lost and the command stopped (EX_TEMPFAIL: try again later)
	exitCannotStart = 127 // the command could not be started, as a shell reports it
)

// waitFlag is the -wait flag: unset, Acquire waits until the lease is free.
type waitFlag struct {
	d   time.Duration
	set bool
}

func (w *waitFlag) String() string {
	if w == nil || !w.set {
		return ""
	}
	return w.d.String()
}

func (w *waitFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("parse error")
	}
	w.d, w.set = d, true
	return nil
}

// runConfig is what `leasehold run` is told.
type runConfig struct {
	redis   redisFlags
	key     string
	limit   int
	permits int
	ttl     time.Duration
	wait    waitFlag
	nowait  bool
	grace   time.Duration
	command []string // what to run, after "--"
}

// oneTry reports whether the lease is to be tried once, not waited for.
func (c *runConfig) oneTry() bool { return c.nowait || (c.wait.set && c.wait.d == 0) }

func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg runConfig
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	cfg.redis.register(fs)
	fs.StringVar(&cfg.key, "key", "", "the lease key (required)")
	fs.IntVar(&cfg.limit, "limit", 1, "permits on the key: 1 is a mutex, more a semaphore")
	fs.IntVar(&cfg.permits, "permits", 1, "permits this command takes")
	fs.DurationVar(&cfg.ttl, "ttl", 10*time.Second, "lease TTL; the lease is refreshed every TTL/3 while the command runs")
	fs.Var(&cfg.wait, "wait", "wait at most this `duration` for the lease (default: until it is free; 0 is -n)")
	fs.BoolVar(&cfg.nowait, "n", false, "try once: exit at once if the key is busy")
	fs.BoolVar(&cfg.nowait, "nowait", false, "the same as -n")
	fs.DurationVar(&cfg.grace, "grace", 10*time.Second, "after the lease is lost, how long the command has after SIGTERM before SIGKILL")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: leasehold run -redis URL -key KEY [flags] -- command [args...]

Runs the command while holding a lease on KEY, like flock or consul lock: the lease is taken
first, waiting until it is free (-wait D: at most D; -n: one try), refreshed while the
command runs, and released when it exits. The command sees LEASEHOLD_FENCE and LEASEHOLD_HOLDER.
Signals (INT, TERM, HUP, QUIT, USR1, USR2) are passed to the command. If the lease is lost, the
command gets SIGTERM, then SIGKILL after -grace.

%s

Exit status:
  the command's     128+N if signal N ended it
  %-3d               the key was busy: -n, or -wait ran out
  %-3d               the lease was lost; the command was stopped
  %-3d               interrupted (INT, TERM, HUP, ...) before the command started
  %-3d               the command could not be started
  2                 bad usage
  1                 Redis could not be reached (over Redlock: fewer than a quorum answered), or another error

Flags:
`, processGroupNote, exitBusy, exitLost, exitInterrupted, exitCannotStart)
		fs.PrintDefaults()
	}
	command, ok, code := parseRunFlags(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	switch err := cfg.redis.check(); {
	case err != nil:
		usageError(stderr, "run", err.Error())
	case cfg.key == "":
		usageError(stderr, "run", "-key is required")
	case len(command) == 0:
		usageError(stderr, "run", "no command given after --")
	case cfg.limit < 1:
		usageError(stderr, "run", fmt.Sprintf("-limit %d: must be at least 1", cfg.limit))
	case cfg.permits < 1 || cfg.permits > cfg.limit:
		usageError(stderr, "run", fmt.Sprintf("-permits %d: must be in [1, -limit %d]", cfg.permits, cfg.limit))
	case cfg.ttl < primitives.MinTTL:
		usageError(stderr, "run", fmt.Sprintf("-ttl %v: must be at least %v", cfg.ttl, primitives.MinTTL))
	case cfg.wait.d < 0 || cfg.grace < 0:
		usageError(stderr, "run", "-wait and -grace must not be negative")
	case cfg.nowait && cfg.wait.set:
		usageError(stderr, "run", "-n and -wait: give one")
	default:
		cfg.command = command
		return runUnderLease(ctx, cfg, stdout, stderr)
	}
	return exitUsage
}

// runUnderLease takes the lease, runs the command under it, and returns run's exit status.
func runUnderLease(ctx context.Context, cfg runConfig, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	// Until the command starts, any of those signals ends the wait; one that comes as the lease
	// is granted releases it unused. Once the command has started, they go to the command.
	wctx, stopWaiting := signal.NotifyContext(ctx, forwarded...)
	defer stopWaiting()
	interrupted := func() int {
		fmt.Fprintf(stderr, "leasehold run: interrupted while waiting for %q; nothing acquired\n", cfg.key)
		return exitInterrupted
	}

	store, closeStore, err := cfg.redis.connect(wctx, "run", stderr, cfg.limit)
	if err != nil {
		if wctx.Err() != nil {
			return interrupted()
		}
		fmt.Fprintf(stderr, "leasehold run: %v\n", err)
		return exitFail
	}
	defer closeStore()
	timeout := time.Duration(math.MaxInt64) // no acquire timeout
	if cfg.wait.set {
		timeout = max(cfg.wait.d, time.Millisecond)
	}
	sem, err := primitives.NewSemaphore(store, cfg.key, cfg.limit, primitives.WithTTL(cfg.ttl), primitives.WithAcquireTimeout(timeout))
	if err != nil {
		fmt.Fprintf(stderr, "leasehold run: %v\n", err)
		return exitUsage
	}
	var lease core.Lease
	if cfg.oneTry() {
		lease, err = sem.TryAcquire(wctx, cfg.permits)
	} else {
		lease, err = sem.Acquire(wctx, cfg.permits)
	}
	interruptedWaiting := wctx.Err() != nil // before stopWaiting, which cancels wctx
	stopWaiting()
	switch {
	case err != nil && interruptedWaiting:
		return interrupted()
	case errors.Is(err, core.ErrNotAcquired) && cfg.oneTry():
		fmt.Fprintf(stderr, "leasehold run: %q is busy\n", cfg.key)
		return exitBusy
	case errors.Is(err, core.ErrNotAcquired):
		fmt.Fprintf(stderr, "leasehold run: %q is busy: not acquired within %v\n", cfg.key, cfg.wait.d)
		return exitBusy
	case err != nil:
		fmt.Fprintf(stderr, "leasehold run: %v\n", err)
		return exitFail
	}
	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := lease.Release(rctx); err != nil && !errors.Is(err, core.ErrLost) {
			fmt.Fprintf(stderr, "leasehold run: %v\n", err)
		}
	}

	// A signal that came as the lease was granted, before the command started, is an interrupt
	// before the command started: the command is not started at all.
	if interruptedWaiting || len(sigs) > 0 {
		release()
		fmt.Fprintf(stderr, "leasehold run: interrupted as %q was granted; released, the command not started\n", cfg.key)
		return exitInterrupted
	}
	// A lease lost between its grant and here is never run under.
	if err := lease.Err(); err != nil {
		fmt.Fprintf(stderr, "leasehold run: %v; the command not started\n", err)
		return exitLost
	}
	env := append(os.Environ(), fmt.Sprintf("LEASEHOLD_FENCE=%d", lease.Fence()), "LEASEHOLD_HOLDER="+lease.Holder())
	c, err := startChild(cfg.command, env, stdio{in: os.Stdin, out: stdout, err: stderr})
	if err != nil {
		release()
		fmt.Fprintf(stderr, "leasehold run: %v\n", err)
		return exitCannotStart
	}
	var kill <-chan time.Time
	lost := lease.Done()
	for {
		select {
		case s := <-sigs:
			c.signal(s.(syscall.Signal))
		case <-lost:
			lost = nil
			fmt.Fprintf(stderr, "leasehold run: %v; stopping the command: SIGTERM, SIGKILL after -grace %v\n", lease.Err(), cfg.grace)
			c.signal(syscall.SIGTERM)
			kill = time.After(cfg.grace)
		case <-kill:
			fmt.Fprintf(stderr, "leasehold run: the command outlived -grace %v; SIGKILL\n", cfg.grace)
			c.kill()
		case <-c.done():
			err := c.wait()
			release()
			if lost == nil {
				return exitLost
			}
			return exitStatus(err)
		}
	}
}

// stdio is where a started command reads and writes.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// exitStatus is the shell's view of how a command ended.
func exitStatus(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return exitFail
		}
		return exitOK
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

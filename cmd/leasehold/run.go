package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// exitBusy is the status of `leasehold run` when the lease could not be had within --wait.
const exitBusy = 3

// runConfig is what `leasehold run` is told.
type runConfig struct {
	redis   redisFlags
	key     string
	limit   int
	permits int
	ttl     time.Duration
	wait    time.Duration
	grace   time.Duration
	command []string // what to run, after "--"
}

func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg runConfig
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	cfg.redis.register(fs)
	fs.StringVar(&cfg.key, "key", "", "the lease key (required)")
	fs.IntVar(&cfg.limit, "limit", 1, "permits on the key: 1 is a mutex, more a semaphore")
	fs.IntVar(&cfg.permits, "permits", 1, "permits this command takes")
	fs.DurationVar(&cfg.ttl, "ttl", 10*time.Second, "lease TTL; the lease is refreshed every TTL/3 while the command runs")
	fs.DurationVar(&cfg.wait, "wait", 0, "how long to wait for the lease (0: fail at once if busy)")
	fs.DurationVar(&cfg.grace, "grace", 10*time.Second, "after the lease is lost, how long the command has after SIGTERM before SIGKILL")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: leasehold run -redis URL -key KEY [flags] -- command [args...]

Runs the command while holding a lease on KEY, like flock or consul lock: the lease is taken
first (waiting up to -wait), refreshed while the command runs, and released when it exits.
Signals (INT, TERM, HUP, QUIT, USR1, USR2) are passed to the command. If the lease is lost, the
command gets SIGTERM, then SIGKILL after -grace. leasehold exits with the command's status
(128+N if a signal N ended it), %d if the lease could not be had within -wait, 2 on bad usage,
1 if Redis could not be reached; nothing is acquired then.

Flags:
`, exitBusy)
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
	case cfg.wait < 0 || cfg.grace < 0:
		usageError(stderr, "run", "-wait and -grace must not be negative")
	default:
		cfg.command = command
		return runUnderLease(ctx, cfg, stdout, stderr)
	}
	return exitUsage
}

func runUnderLease(ctx context.Context, cfg runConfig, stdout, stderr io.Writer) int {
	command := cfg.command
	// Signals go to the command from here on, not to our context.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)

	store, closeStore, err := cfg.redis.connect(ctx, "run", stderr, cfg.limit)
	if err != nil {
		fmt.Fprintf(stderr, "leasehold run: %v\n", err)
		return exitFail
	}
	defer closeStore()
	sem, err := primitives.NewSemaphore(store, cfg.key, cfg.limit, primitives.WithTTL(cfg.ttl), primitives.WithAcquireTimeout(max(cfg.wait, time.Millisecond)))
	if err != nil {
		fmt.Fprintf(stderr, "leasehold run: %v\n", err)
		return exitUsage
	}
	var lease core.Lease
	if cfg.wait == 0 {
		lease, err = sem.TryAcquire(ctx, cfg.permits)
	} else {
		lease, err = sem.Acquire(ctx, cfg.permits)
	}
	switch {
	case errors.Is(err, core.ErrNotAcquired):
		fmt.Fprintf(stderr, "leasehold run: %q is busy: not acquired within %v\n", cfg.key, cfg.wait)
		return exitBusy
	case err != nil:
		fmt.Fprintf(stderr, "leasehold run: %v\n", err)
		return exitFail
	}

	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), fmt.Sprintf("LEASEHOLD_FENCE=%d", lease.Fence()), "LEASEHOLD_HOLDER="+lease.Holder())
	if err := cmd.Start(); err != nil {
		lease.Release(context.WithoutCancel(ctx))
		fmt.Fprintf(stderr, "leasehold run: %v\n", err)
		return 127
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var kill <-chan time.Time
	lost := lease.Done()
	for {
		select {
		case s := <-sigs:
			cmd.Process.Signal(s)
		case <-lost:
			lost = nil
			fmt.Fprintf(stderr, "leasehold run: %v; stopping the command\n", lease.Err())
			cmd.Process.Signal(syscall.SIGTERM)
			kill = time.After(cfg.grace)
		case <-kill:
			cmd.Process.Kill()
		case err := <-exited:
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if rerr := lease.Release(rctx); rerr != nil && !errors.Is(rerr, core.ErrLost) {
				fmt.Fprintf(stderr, "leasehold run: %v\n", rerr)
			}
			cancel()
			return exitStatus(err)
		}
	}
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

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
	exitConfig      = 78  // the key is held under another limit; nothing acquired (EX_CONFIG)
	exitCannotStart = 127 // the command could not be started, as a shell reports it
)

// storeFailure is what exit status 1 means in run's and elect's help, as its lines are indented.
const storeFailure = `the store could not be used, and the line on stderr says why: unreachable,
                    authentication failed, TLS failed, not a Redis (or PostgreSQL) server, no
                    such database; over Redlock, fewer than a quorum answered; or another error`

// waitFlag is a duration flag that knows whether it was given: -wait (unset, Acquire waits until
// the lease is free) and -grace (unset, a fifth of the TTL).
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

// runConfig is what `leasehold run` and `leasehold elect` are told.
type runConfig struct {
	name    string // the subcommand, for messages: run or elect
	elect   bool   // campaign on the key (elect) instead of taking permits (run)
	store   storeFlags
	key     string
	limit   int
	permits int
	ttl     time.Duration
	wait    waitFlag
	nowait  bool
	grace   waitFlag // the command's time between SIGTERM and SIGKILL: see stopTimes
	value   string   // kept with the lease: -value, elect's VALUE, or defaultValue
	command []string // what to run, after "--"

	lockDelay time.Duration // -lock-delay: primitives.WithLockDelay
	refreshed chan struct{} // told, without blocking, when a refresh has moved the deadline
	// abandoned receives, without blocking, the release of a grant the store may have made for
	// an acquire that failed (its reply lost as a signal ended the wait, or the connection broke).
	abandoned chan core.ReleaseRequest
}

// oneTry reports whether the lease is to be tried once, not waited for.
func (c *runConfig) oneTry() bool { return c.nowait || (c.wait.set && c.wait.d == 0) }

// registerTiming adds the flags run and elect share besides the Redis ones: -ttl, -wait, -n,
// -nowait, -grace and -lock-delay.
func (c *runConfig) registerTiming(fs *flag.FlagSet) {
	fs.DurationVar(&c.ttl, "ttl", 10*time.Second, "lease TTL; the lease is refreshed every TTL/3 while the command runs")
	fs.Var(&c.wait, "wait", "wait at most this `duration` for the lease (default: until it is free; 0 is -n)")
	fs.BoolVar(&c.nowait, "n", false, "try once: exit at once if the key is busy")
	fs.BoolVar(&c.nowait, "nowait", false, "the same as -n")
	fs.Var(&c.grace, "grace", "the `duration` the command has between SIGTERM and SIGKILL when the lease is not renewed in time:\n"+
		"SIGKILL comes at the lease's stop margin (TTL/10) before its deadline, SIGTERM -grace before that;\n"+
		"at most 2/5 of -ttl (default: TTL/5, 2s at the default -ttl)")
	fs.DurationVar(&c.lockDelay, "lock-delay", 0, "if the lease expires unreleased (leasehold stalled or died), the store keeps KEY closed this much longer\n"+
		"(Consul's lock-delay): time for a stalled machine to stop the command before the next holder starts")
}

// stopMargin is how long before its deadline a lease that was not renewed is reported lost, and
// the command gets SIGKILL: primitives' default, a tenth of the TTL, given explicitly.
func (c *runConfig) stopMargin() time.Duration { return c.ttl / 10 }

// maxGrace is the longest -grace the TTL allows: SIGTERM then comes at most TTL/2 before the
// lease's deadline, so a refresh sent on time (every TTL/3) has TTL/6 to be answered, or retried,
// before the command is told to stop.
func (c *runConfig) maxGrace() time.Duration { return c.ttl/2 - c.stopMargin() }

// graceOrDefault is -grace, or a fifth of the TTL if it was not given.
func (c *runConfig) graceOrDefault() time.Duration {
	if c.grace.set {
		return c.grace.d
	}
	return c.ttl / 5
}

// stopTimes returns when the command is stopped if the lease is not renewed past deadline (its
// Deadline): SIGKILL at kill, the stop margin before the deadline, when the lease is reported
// lost, so that the command's group is dead before the store can grant the key to anyone else;
// SIGTERM at term, -grace before that.
func (c *runConfig) stopTimes(deadline time.Time) (term, kill time.Time) {
	kill = deadline.Add(-c.stopMargin())
	return kill.Add(-c.graceOrDefault()), kill
}

// checkTiming returns an error naming the first bad flag of those registerTiming adds.
func (c *runConfig) checkTiming() error {
	switch {
	case c.ttl < primitives.MinTTL:
		return fmt.Errorf("-ttl %v: must be at least %v", c.ttl, primitives.MinTTL)
	case c.wait.d < 0 || c.grace.d < 0:
		return errors.New("-wait and -grace must not be negative")
	case c.nowait && c.wait.set:
		return errors.New("-n and -wait: give one")
	case c.grace.d > c.maxGrace():
		fix := "lower -grace (no -ttl allows it)" // 5/2 of it is beyond the longest TTL, and may overflow
		if c.grace.d <= primitives.MaxDuration/5*2 {
			fix = fmt.Sprintf("lower -grace, or raise -ttl to at least %v", c.grace.d*5/2)
		}
		return fmt.Errorf("-grace %v: at most %v (2/5 of -ttl %v): the command gets SIGTERM -grace before the lease's stop margin (TTL/10), "+
			"which must leave a refresh time to be retried; %s", c.grace.d, c.maxGrace(), c.ttl, fix)
	case c.lockDelay < 0 || c.lockDelay > primitives.MaxDuration:
		return fmt.Errorf("-lock-delay %v: must be in [0, %v]", c.lockDelay, primitives.MaxDuration)
	}
	return nil
}

// acquire takes the lease the command runs under: cfg.permits of the key's cfg.limit for run,
// the key's leadership for elect, with cfg.value; waiting as -wait and -n say. A bad argument
// is an error wrapping core.ErrInvalid; a busy key, one wrapping core.ErrNotAcquired.
func (c *runConfig) acquire(ctx context.Context, store core.Store) (core.Lease, error) {
	timeout := time.Duration(math.MaxInt64) // no acquire timeout
	if c.wait.set {
		timeout = max(c.wait.d, time.Millisecond)
	}
	opts := []primitives.Option{primitives.WithTTL(c.ttl), primitives.WithAcquireTimeout(timeout), primitives.WithStopMargin(c.stopMargin())}
	if c.lockDelay > 0 {
		opts = append(opts, primitives.WithLockDelay(c.lockDelay))
	}
	if c.refreshed != nil {
		refreshed, abandoned := c.refreshed, c.abandoned
		opts = append(opts, primitives.WithEvents(func(e primitives.Event) {
			switch {
			case e.Kind == primitives.EventRefreshed:
				select {
				case refreshed <- struct{}{}:
				default:
				}
			case e.Kind == primitives.EventAcquireFailed && !errors.Is(e.Err, core.ErrLimitMismatch) && !errors.Is(e.Err, core.ErrInvalid):
				select {
				case abandoned <- core.ReleaseRequest{Key: e.Key, Holder: e.Holder}: // the holder id is this acquire's own: any fence is its grant
				default:
				}
			}
		}))
	}
	if c.elect {
		if c.oneTry() {
			opts = append(opts, primitives.WithAttempts(1))
		}
		el, err := primitives.NewElection(store, c.key, opts...)
		if err != nil {
			return nil, err
		}
		return el.Campaign(ctx, c.value)
	}
	sem, err := primitives.NewSemaphore(store, c.key, c.limit, append(opts, primitives.WithValue(c.value))...)
	if err != nil {
		return nil, err
	}
	if c.oneTry() {
		return sem.TryAcquire(ctx, c.permits)
	}
	return sem.Acquire(ctx, c.permits)
}

// busy is what the key is when the lease could not be had: busy for run; led for elect.
func (c *runConfig) busy() string {
	if c.elect {
		return fmt.Sprintf("%q has a leader", c.key)
	}
	return fmt.Sprintf("%q is busy", c.key)
}

// mismatch says why err, a refusal wrapping core.ErrLimitMismatch, refused the lease, and how
// to get it: with the key's limit, or once nobody holds the key.
func (c *runConfig) mismatch(err error) string {
	var lm *core.LimitMismatchError
	if !errors.As(err, &lm) {
		return fmt.Sprintf("%v: use the key's -limit, or wait until nobody holds %q", err, c.key)
	}
	if c.elect {
		return fmt.Sprintf("%q is held under limit %d, and an election has limit 1: campaign on a key that only elect uses, or wait until nobody holds it",
			c.key, lm.Held)
	}
	return fmt.Sprintf("%q is held under limit %d, this run has -limit %d: use the key's limit (-limit %d), or wait until nobody holds it",
		c.key, lm.Held, lm.Requested, lm.Held)
}

// runCommand runs `leasehold run args` and returns the exit status.
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := runConfig{name: "run"}
	var value valueFlag
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	cfg.store.register(fs)
	fs.StringVar(&cfg.key, "key", "", "the lease key (required)")
	fs.IntVar(&cfg.limit, "limit", 1, "permits on the key: 1 is a mutex, more a semaphore")
	fs.IntVar(&cfg.permits, "permits", 1, "permits this command takes")
	cfg.registerTiming(fs)
	fs.Var(&value, "value", "the `value` kept with the lease, which inspect shows: at most 1024 bytes (default:\n"+
		"this host, leasehold's pid and the command, as in \"host-a pid 4242: make deploy\", cut to fit)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: leasehold run -redis URL|-postgres URL -key KEY [flags] -- command [args...]

Runs the command while holding a lease on KEY, like flock or consul lock: the lease is taken
first, waiting until it is free (-wait D: at most D; -n: one try), refreshed while the
command runs, and released when it exits. The command sees LEASEHOLD_FENCE and LEASEHOLD_HOLDER.
The lease carries a value that leasehold inspect shows: by default this host, leasehold's pid
and the command (-value sets another). Signals (INT, TERM, HUP, QUIT, USR1, USR2) are passed to
the command.

The command is gone before the lease can pass to anyone else. If the lease is not renewed in
time (the store unreachable, say), the command gets SIGTERM at its deadline less the stop margin
(TTL/10) less -grace, and SIGKILL at the deadline less the stop margin, before the store lets the
lease expire; a lease lost sooner (taken from the store) stops it at once the same way: SIGTERM,
SIGKILL after -grace. -grace is at most 2/5 of -ttl (longer is refused: raise -ttl). -lock-delay
keeps the key closed that much longer after an expiry, by the store's clock, for a machine that
stalls whole (a VM paused) to stop the command first.

%s

Exit status:
  the command's     128+N if signal N ended it
  %-3d               the key was busy: -n, or -wait ran out
  %-3d               the lease was lost, or not renewed in time; the command was stopped
  %-3d               the key is held under another -limit: use the key's, or wait until
                    nobody holds it; nothing acquired, the command not started
  %-3d               interrupted (INT, TERM, HUP, ...) before the command started
  %-3d               the command could not be started
  2                 bad usage
  1                 %s

Flags:
`, processGroupNote, exitBusy, exitLost, exitConfig, exitInterrupted, exitCannotStart, storeFailure)
		fs.PrintDefaults()
	}
	command, ok, code := parseRunFlags(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	cfg.value = value.s
	if !value.set {
		cfg.value = defaultValue(command)
	}
	timingErr := cfg.checkTiming()
	switch err := cfg.store.check(); {
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
	case len(cfg.value) > core.MaxValueLen:
		usageError(stderr, "run", fmt.Sprintf("-value: %d bytes, at most %d", len(cfg.value), core.MaxValueLen))
	case timingErr != nil:
		usageError(stderr, "run", timingErr.Error())
	default:
		cfg.command = command
		return runUnderLease(ctx, cfg, stdout, stderr)
	}
	return exitUsage
}

// runUnderLease takes the lease (cfg.acquire), runs the command under it, and returns the exit
// status of run or elect.
func runUnderLease(ctx context.Context, cfg runConfig, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	// Until the command starts, any of those signals ends the wait; one that comes as the lease
	// is granted releases it unused. Once the command has started, they go to the command.
	wctx, stopWaiting := signal.NotifyContext(ctx, forwarded...)
	defer stopWaiting()
	say := func(format string, args ...any) {
		fmt.Fprintf(stderr, "leasehold %s: %s\n", cfg.name, fmt.Sprintf(format, args...))
	}
	interrupted := func() int {
		say("interrupted while waiting for %q; nothing acquired", cfg.key)
		return exitInterrupted
	}

	store, closeStore, err := cfg.store.connect(wctx, cfg.name, stderr, cfg.limit)
	if err != nil {
		if wctx.Err() != nil {
			return interrupted()
		}
		say("%v", err)
		return exitFail
	}
	defer closeStore()
	cfg.refreshed, cfg.abandoned = make(chan struct{}, 1), make(chan core.ReleaseRequest, 1)
	lease, err := cfg.acquire(wctx, store)
	interruptedWaiting := wctx.Err() != nil // before stopWaiting, which cancels wctx
	stopWaiting()
	if err != nil {
		// The store may have granted the lease although the reply was lost. The library releases
		// such a grant in the background, which this process's exit would cut short, leaving the
		// key held until its TTL: release it here, bounded in time, before exiting.
		select {
		case req := <-cfg.abandoned:
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(cfg.ttl, 5*time.Second))
			store.Release(rctx, req)
			cancel()
		default:
		}
	}
	switch {
	case err != nil && interruptedWaiting:
		return interrupted()
	case errors.Is(err, core.ErrInvalid):
		say("%v", err)
		return exitUsage
	case errors.Is(err, core.ErrLimitMismatch):
		say("%s; nothing acquired, the command not started", cfg.mismatch(err))
		return exitConfig
	case errors.Is(err, core.ErrNotAcquired) && cfg.oneTry():
		say("%s", cfg.busy())
		return exitBusy
	case errors.Is(err, core.ErrNotAcquired):
		say("%s: not acquired within %v", cfg.busy(), cfg.wait.d)
		return exitBusy
	case err != nil:
		say("%v", err)
		return exitFail
	}
	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := lease.Release(rctx); err != nil && !errors.Is(err, core.ErrLost) {
			say("%v", err)
		}
	}

	// A signal that came as the lease was granted, before the command started, is an interrupt
	// before the command started: the command is not started at all.
	if interruptedWaiting || len(sigs) > 0 {
		release()
		say("interrupted as %q was granted; released, the command not started", cfg.key)
		return exitInterrupted
	}
	// A lease lost between its grant and here is never run under.
	if err := lease.Err(); err != nil {
		say("%v; the command not started", err)
		return exitLost
	}
	env := append(os.Environ(), fmt.Sprintf("LEASEHOLD_FENCE=%d", lease.Fence()), "LEASEHOLD_HOLDER="+lease.Holder())
	deadline := lease.Deadline()
	term, kill := cfg.stopTimes(deadline)
	c, err := startChild(cfg.command, env, stdio{in: os.Stdin, out: stdout, err: stderr}, stopAt{term, kill, deadline})
	if err != nil {
		release()
		say("%v", err)
		return exitCannotStart
	}
	grace := cfg.graceOrDefault()
	stopping := false // the command has been told to stop: run exits exitLost
	lost := lease.Done()
	for {
		select {
		case s := <-sigs:
			c.signal(s.(syscall.Signal))
		case <-cfg.refreshed:
			if d := lease.Deadline(); !stopping && d.After(deadline) {
				deadline = d
				term, kill = cfg.stopTimes(deadline)
				c.schedule(stopAt{term, kill, deadline})
			}
		case <-lost:
			lost = nil
			if !stopping {
				// Lost before the command was told to stop (the store no longer holds it, say):
				// SIGTERM now, SIGKILL after -grace, and no later than planned.
				stopping = true
				now := time.Now()
				if k := now.Add(grace); k.Before(kill) {
					kill = k
				}
				if left := kill.Sub(now); left > 0 {
					say("%v; stopping the command: SIGTERM, SIGKILL after %v", lease.Err(), left.Round(time.Millisecond))
				} else {
					say("%v; stopping the command: SIGKILL", lease.Err())
				}
				c.schedule(stopAt{now, kill, deadline})
			}
		case s := <-c.stops():
			switch s {
			case syscall.SIGTERM:
				if !stopping {
					stopping = true
					say("the lease on %q was not renewed in time; stopping the command: SIGTERM, SIGKILL after -grace %v, %v before its deadline",
						cfg.key, grace, cfg.stopMargin())
				}
			case syscall.SIGKILL:
				stopping = true
				say("the command outlived -grace %v; SIGKILL", grace)
			}
		case <-c.done():
			err := c.wait()
			release()
			if stopping || lost == nil {
				return exitLost
			}
			return exitStatus(err)
		}
	}
}

// stopAt is when the command is stopped unless the lease is renewed first: SIGTERM at term,
// SIGKILL at kill, both before the lease's deadline (see runConfig.stopTimes).
type stopAt struct {
	term, kill, deadline time.Time
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

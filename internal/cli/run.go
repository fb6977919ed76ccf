package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/supervise"
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

// keysFlag is run's -key: every one given, in order.
type keysFlag []string

func (k *keysFlag) String() string {
	if k == nil {
		return ""
	}
	return strings.Join(*k, " ")
}

func (k *keysFlag) Set(s string) error {
	*k = append(*k, s)
	return nil
}

// runHelp is the text of `leasehold run --help`, before the flags. Its verbs are the process
// group note, the exit statuses and what status 1 means.
const runHelp = `Usage: leasehold run -redis URL|-postgres URL -key KEY [-key KEY...] [flags] -- command [args...]

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

Given -key more than once, run holds every key while the command runs, all or nothing: a mutex
on each (a primitives.MultiLock), taken in sorted key order whatever the order given, so runs
naming the same keys in other orders wait for each other and never deadlock. -wait bounds the
whole, -n tries each key once, and a busy key leaves none held. Each lease is refreshed on its
own; the stop above follows the earliest deadline of them, and the loss of any one stops the
command as a loss does. LEASEHOLD_FENCE and LEASEHOLD_HOLDER are the first key's, and
LEASEHOLD_FENCES holds every key's fence in the order given: KEY=FENCE, space-separated, a key
Go-quoted if it holds a space, a quote, an '=' or a character that does not print (the fence
follows the last '='), as in LEASEHOLD_FENCES="db=17 \"cache 2\"=4". -limit and -permits other
than 1 are a usage error.

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
`

// runCommand runs `leasehold run args` and returns the exit status.
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer, backends []Backend) int {
	cfg := runConfig{name: "run"}
	var value valueFlag
	var keys keysFlag
	fs := cfg.runFlags(&value, &keys, backends)
	command, ok, code := parseRunFlags(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	cfg.value = value.s
	if !value.set {
		cfg.value = defaultValue(command)
	}
	if len(keys) > 0 {
		cfg.key = keys[0]
	}
	if len(keys) > 1 {
		cfg.keys = keys
	}
	if msg := cfg.checkRun(keys, command); msg != "" {
		usageError(stderr, "run", msg)
		return exitUsage
	}
	cfg.command = command
	return runUnderLease(ctx, cfg, stdout, stderr)
}

// runFlags returns run's flag set, which sets c, value and keys, and prints runHelp on -help.
func (c *runConfig) runFlags(value *valueFlag, keys *keysFlag, backends []Backend) *flag.FlagSet {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	c.store.register(fs, backends)
	fs.Var(keys, "key", "the lease `KEY` (required); given more than once, the command holds every key, all or nothing,\n"+
		"a mutex on each (-limit and -permits 1): see above")
	fs.IntVar(&c.limit, "limit", 1, "permits on the key: 1 is a mutex, more a semaphore")
	fs.IntVar(&c.permits, "permits", 1, "permits this command takes")
	c.registerTiming(fs)
	fs.Var(value, "value", "the `value` kept with the lease, which inspect shows: at most 1024 bytes (default:\n"+
		"this host, leasehold's pid and the command, as in \"host-a pid 4242: make deploy\", cut to fit)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), c.store.help(fmt.Sprintf(runHelp, supervise.GroupNote, exitBusy, exitLost, exitConfig, exitInterrupted, exitCannotStart, storeFailure)))
		fs.PrintDefaults()
	}
	return fs
}

// checkRun returns what is wrong with run's command line, c as parsed with its keys and command,
// or "": the first problem, in the order the flags are documented.
func (c *runConfig) checkRun(keys []string, command []string) string {
	timingErr := c.checkTiming()
	switch err := c.store.check(); {
	case err != nil:
		return err.Error()
	case c.key == "" && !c.multi():
		return "-key is required"
	case c.multi() && keysErr(keys) != nil:
		return keysErr(keys).Error()
	case c.multi() && (c.limit != 1 || c.permits != 1):
		return multiLimitErr(c.limit, c.permits)
	case len(command) == 0:
		return "no command given after --"
	case c.limit < 1:
		return fmt.Sprintf("-limit %d: must be at least 1", c.limit)
	case c.permits < 1 || c.permits > c.limit:
		return fmt.Sprintf("-permits %d: must be in [1, -limit %d]", c.permits, c.limit)
	case len(c.value) > core.MaxValueLen:
		return fmt.Sprintf("-value: %d bytes, at most %d", len(c.value), core.MaxValueLen)
	case timingErr != nil:
		return timingErr.Error()
	}
	return ""
}

// keysErr returns an error naming the first of several -key that is empty or given twice.
func keysErr(keys []string) error {
	for i, k := range keys {
		if k == "" {
			return errors.New(`-key "": a key must not be empty`)
		}
		if slices.Contains(keys[:i], k) {
			return fmt.Errorf("-key %q given twice", k)
		}
	}
	return nil
}

// multiLimitErr says that -limit and -permits, as given, do not go with several keys.
func multiLimitErr(limit, permits int) string {
	var flags []string
	if limit != 1 {
		flags = append(flags, fmt.Sprintf("-limit %d", limit))
	}
	if permits != 1 {
		flags = append(flags, fmt.Sprintf("-permits %d", permits))
	}
	return fmt.Sprintf("%s with several -key: a run on several keys holds a mutex on each (-limit 1, -permits 1)", strings.Join(flags, " and "))
}

package cli

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
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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

// runConfig is what `leasehold run` and `leasehold elect` are told.
type runConfig struct {
	name    string // the subcommand, for messages: run or elect
	elect   bool   // campaign on the key (elect) instead of taking permits (run)
	store   storeFlags
	key     string   // the key; with several (run -key A -key B), the first
	keys    []string // run's keys, in the order given, when there are several: a MultiLock on them
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
	// refused holds, when not nil, the key of the last refused or failed acquire: the busy one
	// of several keys.
	refused *atomic.Pointer[string]
}

// multi reports whether the command runs holding several keys.
func (c *runConfig) multi() bool { return len(c.keys) > 1 }

// keysShown is how many of several keys a message names; the rest are counted.
const keysShown = 6

// keysText names the key, or every key (`"a", "b" and "c"`), in messages: with more than
// keysShown, the first of them and how many more (`"a", "b", … and 994 more`).
func (c *runConfig) keysText() string {
	if !c.multi() {
		return strconv.Quote(c.key)
	}
	shown := c.keys
	if len(shown) > keysShown {
		shown = shown[:keysShown-1]
	}
	q := make([]string, len(shown))
	for i, k := range shown {
		q[i] = strconv.Quote(k)
	}
	if len(shown) < len(c.keys) {
		return strings.Join(q, ", ") + fmt.Sprintf(", … and %d more", len(c.keys)-len(shown))
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}

// refusedKey is the key an acquire of several was refused on, or the first key if unknown.
func (c *runConfig) refusedKey() string {
	if c.multi() && c.refused != nil {
		if k := c.refused.Load(); k != nil {
			return *k
		}
	}
	return c.key
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

// checkTiming returns an error naming the first bad flag of those registerTiming adds (both,
// when -wait and -grace are both negative), with its bound.
func (c *runConfig) checkTiming() error {
	switch {
	case c.ttl < primitives.MinTTL:
		return fmt.Errorf("-ttl %v: must be at least %v", c.ttl, primitives.MinTTL)
	case c.wait.d < 0 && c.grace.d < 0:
		return fmt.Errorf("-wait %v and -grace %v: must not be negative", c.wait.d, c.grace.d)
	case c.wait.d < 0:
		return fmt.Errorf("-wait %v: must not be negative", c.wait.d)
	case c.grace.d < 0:
		return fmt.Errorf("-grace %v: must not be negative", c.grace.d)
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

// acquire takes the lease the command runs under: cfg.permits of the key's cfg.limit for run
// (a primitives.Mutex when the limit is 1, a Semaphore otherwise, as errors name it), the key's
// leadership for elect, with cfg.value; waiting as -wait and -n say. With several
// keys, it takes a mutex on each, all or nothing (a primitives.MultiLock: in sorted order, so
// that runs naming the same keys in other orders cannot deadlock), -wait bounding the whole and
// -n trying each once. A bad argument is an error wrapping core.ErrInvalid; a busy key, one
// wrapping core.ErrNotAcquired.
func (c *runConfig) acquire(ctx context.Context, store core.Store) (heldLease, error) {
	timeout := time.Duration(math.MaxInt64) // no acquire timeout
	if c.wait.set {
		timeout = max(c.wait.d, time.Millisecond)
	}
	opts := []primitives.Option{primitives.WithTTL(c.ttl), primitives.WithAcquireTimeout(timeout), primitives.WithStopMargin(c.stopMargin())}
	if c.lockDelay > 0 {
		opts = append(opts, primitives.WithLockDelay(c.lockDelay))
	}
	if c.refreshed != nil {
		refreshed, abandoned, refused := c.refreshed, c.abandoned, c.refused
		opts = append(opts, primitives.WithEvents(func(e primitives.Event) {
			if refused != nil && (e.Kind == primitives.EventRefused || e.Kind == primitives.EventAcquireFailed) {
				key := e.Key
				refused.Store(&key)
			}
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
	if c.multi() {
		ml, err := primitives.NewMultiLock(store, c.keys, append(opts, primitives.WithValue(c.value))...)
		if err != nil {
			return nil, err
		}
		var m *primitives.MultiLease
		if c.oneTry() {
			m, err = ml.TryAcquire(ctx)
		} else {
			m, err = ml.Acquire(ctx)
		}
		if err != nil {
			return nil, err
		}
		return multiHeld{m, m.Leases()}, nil
	}
	opts = append(opts, primitives.WithValue(c.value))
	if c.limit == 1 { // a mutex, so named in its errors
		mu, err := primitives.NewMutex(store, c.key, opts...)
		if err != nil {
			return nil, err
		}
		if c.oneTry() {
			return mu.TryAcquire(ctx)
		}
		return mu.Acquire(ctx)
	}
	sem, err := primitives.NewSemaphore(store, c.key, c.limit, opts...)
	if err != nil {
		return nil, err
	}
	if c.oneTry() {
		return sem.TryAcquire(ctx, c.permits)
	}
	return sem.Acquire(ctx, c.permits)
}

// heldLease is what the command runs under: a core.Lease, or a multiHeld.
type heldLease interface {
	Deadline() time.Time
	Done() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
}

// multiHeld is the leases of a run on several keys, held together: lost with any of them.
type multiHeld struct {
	*primitives.MultiLease
	leases []core.Lease // one per key, in the order given
}

// Deadline is the earliest of the leases' deadlines, which the command's stop follows: each
// lease is refreshed on its own, and the first not renewed in time stops the command.
func (m multiHeld) Deadline() time.Time {
	d, _ := m.earliest()
	return d
}

// earliest returns the earliest deadline of the leases and its key.
func (m multiHeld) earliest() (time.Time, string) {
	d, key := m.leases[0].Deadline(), m.leases[0].Key()
	for _, l := range m.leases[1:] {
		if ld := l.Deadline(); ld.Before(d) {
			d, key = ld, l.Key()
		}
	}
	return d, key
}

// dueKey is the key whose lease the stop's schedule follows: with several, the one with the
// earliest deadline.
func (c *runConfig) dueKey(lease heldLease) string {
	if m, ok := lease.(multiHeld); ok {
		_, key := m.earliest()
		return key
	}
	return c.key
}

// leaseEnv is what the command is told of its lease: LEASEHOLD_FENCE and LEASEHOLD_HOLDER;
// with several keys, those of the first key given, and LEASEHOLD_FENCES, every key's fence.
func leaseEnv(lease heldLease) []string {
	m, ok := lease.(multiHeld)
	if !ok {
		l := lease.(core.Lease)
		return []string{fmt.Sprintf("LEASEHOLD_FENCE=%d", l.Fence()), "LEASEHOLD_HOLDER=" + l.Holder()}
	}
	fences := make([]string, len(m.leases))
	for i, l := range m.leases {
		fences[i] = fmt.Sprintf("%s=%d", fencesKey(l.Key()), l.Fence())
	}
	return []string{fmt.Sprintf("LEASEHOLD_FENCE=%d", m.leases[0].Fence()), "LEASEHOLD_HOLDER=" + m.leases[0].Holder(),
		"LEASEHOLD_FENCES=" + strings.Join(fences, " ")}
}

// fencesKey is key as LEASEHOLD_FENCES writes it: as it is, or Go-quoted if it is empty or
// holds a space, a quote, an '=' or a character that does not print.
func fencesKey(key string) string {
	if q := plainOrQuoted(key); q != key || strings.Contains(key, "=") {
		return strconv.Quote(key)
	}
	return key
}

// busy is what the key is when the lease could not be had: busy for run; led for elect. With
// several keys, it names the busy one. by, when not "", says who holds it (holdersText).
func (c *runConfig) busy(by string) string {
	if by != "" {
		by = " (" + by + ")"
	}
	if c.elect {
		return fmt.Sprintf("%q has a leader%s", c.key, by)
	}
	return fmt.Sprintf("%q is busy%s", c.refusedKey(), by)
}

// holdersOf asks store who holds key, within a second, for the busy line: holdersText of its
// snapshot, or "" if the store cannot tell in time.
func holdersOf(ctx context.Context, store core.Store, key string) string {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	snap, err := store.Inspect(ictx, key)
	if err != nil {
		return ""
	}
	return holdersText(snap)
}

// holderValueWidth is the most of a holder's value the busy line shows.
const holderValueWidth = 80

// holdersText says who holds the key snap describes: its first holder, by value (what it said of
// itself: run's -value, by default host, pid and command) or else its id, and how many more;
// with no holder, the lock delay that keeps it closed; "" when it is free by now.
func holdersText(snap core.Snapshot) string {
	name := func(holder, value string) string {
		if value != "" {
			return quoteValue(value, holderValueWidth)
		}
		return "holder " + plainOrQuoted(holder)
	}
	switch {
	case len(snap.Leases) == 1:
		return "held by " + name(snap.Leases[0].Holder, snap.Leases[0].Value)
	case len(snap.Leases) > 1:
		return fmt.Sprintf("held by %s and %d more", name(snap.Leases[0].Holder, snap.Leases[0].Value), len(snap.Leases)-1)
	case len(snap.Delayed) > 0:
		d := snap.Delayed[0]
		return fmt.Sprintf("closed %v more by the lock delay of holder %s, whose lease expired unreleased", d.Left.Round(time.Millisecond), plainOrQuoted(d.Holder))
	}
	return ""
}

// noneTaken ends the busy line of a run on several keys: none was acquired. For one key, "".
func (c *runConfig) noneTaken() string {
	if !c.multi() {
		return ""
	}
	return fmt.Sprintf("; none of %s acquired", c.keysText())
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
	if c.multi() {
		return fmt.Sprintf("%q is held under limit %d, and a run on several keys takes each as a mutex (limit 1): leave it out, or wait until nobody holds it",
			c.refusedKey(), lm.Held)
	}
	return fmt.Sprintf("%q is held under limit %d, this run has -limit %d: use the key's limit (-limit %d), or wait until nobody holds it",
		c.key, lm.Held, lm.Requested, lm.Held)
}

// runCommand runs `leasehold run args` and returns the exit status.
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer, backends []Backend) int {
	cfg := runConfig{name: "run"}
	var value valueFlag
	var keys keysFlag
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	cfg.store.register(fs, backends)
	fs.Var(&keys, "key", "the lease `KEY` (required); given more than once, the command holds every key, all or nothing,\n"+
		"a mutex on each (-limit and -permits 1): see above")
	fs.IntVar(&cfg.limit, "limit", 1, "permits on the key: 1 is a mutex, more a semaphore")
	fs.IntVar(&cfg.permits, "permits", 1, "permits this command takes")
	cfg.registerTiming(fs)
	fs.Var(&value, "value", "the `value` kept with the lease, which inspect shows: at most 1024 bytes (default:\n"+
		"this host, leasehold's pid and the command, as in \"host-a pid 4242: make deploy\", cut to fit)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), cfg.store.help(fmt.Sprintf(`Usage: leasehold run -redis URL|-postgres URL -key KEY [-key KEY...] [flags] -- command [args...]

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
`, processGroupNote, exitBusy, exitLost, exitConfig, exitInterrupted, exitCannotStart, storeFailure)))
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
	if len(keys) > 0 {
		cfg.key = keys[0]
	}
	if len(keys) > 1 {
		cfg.keys = keys
	}
	timingErr := cfg.checkTiming()
	switch err := cfg.store.check(); {
	case err != nil:
		usageError(stderr, "run", err.Error())
	case cfg.key == "" && !cfg.multi():
		usageError(stderr, "run", "-key is required")
	case cfg.multi() && keysErr(keys) != nil:
		usageError(stderr, "run", keysErr(keys).Error())
	case cfg.multi() && (cfg.limit != 1 || cfg.permits != 1):
		usageError(stderr, "run", multiLimitErr(cfg.limit, cfg.permits))
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
		say("interrupted while waiting for %s; nothing acquired", cfg.keysText())
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
	cfg.refreshed, cfg.abandoned = make(chan struct{}, 1), make(chan core.ReleaseRequest, max(1, len(cfg.keys)))
	cfg.refused = new(atomic.Pointer[string])
	lease, err := cfg.acquire(wctx, store)
	interruptedWaiting := wctx.Err() != nil // before stopWaiting, which cancels wctx
	stopWaiting()
	if err != nil {
		// The store may have granted the lease although the reply was lost. The library releases
		// such a grant in the background, which this process's exit would cut short, leaving the
		// key held until its TTL: release it here, bounded in time, before exiting.
		for drained := false; !drained; {
			select {
			case req := <-cfg.abandoned:
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(cfg.ttl, 5*time.Second))
				store.Release(rctx, req)
				cancel()
			default:
				drained = true
			}
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
		say("%s%s", cfg.busy(holdersOf(ctx, store, cfg.refusedKey())), cfg.noneTaken())
		return exitBusy
	case errors.Is(err, core.ErrNotAcquired):
		say("%s: not acquired within %v%s", cfg.busy(holdersOf(ctx, store, cfg.refusedKey())), cfg.wait.d, cfg.noneTaken())
		return exitBusy
	case err != nil:
		say("%v", err)
		return exitFail
	}
	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		err := lease.Release(rctx)
		if err != nil && !errors.Is(err, core.ErrLost) && rctx.Err() == nil {
			// No reply (the call is sent once): the release may not have gone through. Once
			// more: a release that did go through is then reported as one, not as a loss.
			err = lease.Release(rctx)
		}
		if err != nil && !errors.Is(err, core.ErrLost) {
			say("%v", err)
		}
	}

	// A signal that came as the lease was granted, before the command started, is an interrupt
	// before the command started: the command is not started at all.
	if interruptedWaiting || len(sigs) > 0 {
		release()
		say("interrupted as %s was granted; released, the command not started", cfg.keysText())
		return exitInterrupted
	}
	// A lease lost between its grant and here is never run under.
	if err := lease.Err(); err != nil {
		say("%v; the command not started", err)
		return exitLost
	}
	env := append(os.Environ(), leaseEnv(lease)...)
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
						cfg.dueKey(lease), grace, cfg.stopMargin())
				}
			case syscall.SIGKILL:
				stopping = true
				say("the command outlived -grace %v; SIGKILL", grace)
			}
		case <-c.done():
			err := c.wait()
			if !stopping && !time.Now().Before(term) {
				// Past the stop time with no renewal: the supervisor's own switch may have
				// stopped the command before its report of the SIGTERM reached run.
				stopping = true
				say("the lease on %q was not renewed in time; the command was stopped: SIGTERM, SIGKILL after -grace %v, %v before its deadline",
					cfg.dueKey(lease), grace, cfg.stopMargin())
			}
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

package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/supervise"
	"github.com/leasehold/leasehold/primitives"
)

// electHelp is the text of `leasehold elect --help`, before the flags. Its verbs are the
// process group note and the exit statuses.
const electHelp = `Usage: leasehold elect -redis URL|-postgres URL [flags] KEY VALUE -- command [args...]
       leasehold elect -redis URL|-postgres URL [flags] -observe KEY

Leader election on KEY, like etcdctl elect.

With a command, it campaigns: it waits until it leads (-wait D: at most D; -n: one try), then
runs the command while it leads, exactly as leasehold run runs its command under a lease: the
leadership is a lease on KEY that carries VALUE (at most 1024 bytes) and whose fence is the
term, refreshed while the command runs; the command sees LEASEHOLD_FENCE (the term) and
LEASEHOLD_HOLDER. When the command exits, leasehold resigns and the next in line leads. The
command is gone before the leadership can pass: if it is not renewed in time, the command gets
SIGTERM at its deadline less the stop margin (TTL/10) less -grace, and SIGKILL at the deadline
less the stop margin, and elect exits %[2]d. -grace is at most 2/5 of -ttl. -lock-delay keeps
KEY closed that much longer after an expiry, by the store's clock, before the next leader.

%[1]s

With -observe, it prints the leader at once and then each change, one line each, until it is
interrupted (INT or TERM; it then exits %[4]d):
  leader term 17 holder 0f3a9c5e2b7d41a8a6c1d0e9f8b7a6c5 value "host-a pid 4242: make deploy"
  no leader
The value is quoted as a Go string; a holder id with spaces or quotes in it is quoted too.
Changes closer together than one read of the store may come as one line, the latest. If the
store cannot be read, it keeps trying and prints nothing new until it can.

Exit status:
  the command's     128+N if signal N ended it
  %-3[3]d               KEY had a leader: -n, or -wait ran out
  %-3[2]d               the leadership was lost; the command was stopped
  %-3[6]d               KEY is held under a limit other than 1 (by leasehold run -limit N):
                    campaign on a key only elect uses; nothing acquired, the command not started
  %-3[4]d               interrupted (INT, TERM, HUP, ...) before the command started; -observe: always
  %-3[5]d               the command could not be started
  2                 bad usage
  1                 %[7]s

Flags:
`

// electCommand runs `leasehold elect args` and returns the exit status.
func electCommand(ctx context.Context, args []string, stdout, stderr io.Writer, backends []Backend) int {
	cfg := runConfig{name: "elect", elect: true, limit: 1, permits: 1}
	var observe bool
	fs := flag.NewFlagSet("elect", flag.ContinueOnError)
	cfg.store.register(fs, backends)
	fs.BoolVar(&observe, "observe", false, "print the leader of KEY and each change, one line each, until interrupted")
	cfg.registerTiming(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), cfg.store.help(fmt.Sprintf(electHelp, supervise.GroupNote, exitLost, exitBusy, exitInterrupted, exitCannotStart, exitConfig, storeFailure)))
		fs.PrintDefaults()
	}
	before, command, dashes := args, []string(nil), false
	if i := slices.Index(args, "--"); i >= 0 {
		before, command, dashes = args[:i], args[i+1:], true
	}
	positional, ok, code := parseInterleaved(fs, before, stdout, stderr)
	if !ok {
		return code
	}
	if err := cfg.store.check(); err != nil {
		usageError(stderr, "elect", err.Error())
		return exitUsage
	}
	if observe {
		if msg := checkObserve(fs, positional, dashes); msg != "" {
			usageError(stderr, "elect", msg)
			return exitUsage
		}
		cfg.key = positional[0]
		return observeLeader(ctx, cfg, stdout, stderr)
	}
	var msg string
	switch timingErr := cfg.checkTiming(); {
	case len(positional) < 2:
		msg = "KEY and VALUE are required (or -observe KEY)"
	case len(positional) > 2 && !dashes:
		msg = fmt.Sprintf("unexpected argument %q: the command goes after \"--\", as in leasehold elect [flags] KEY VALUE -- cmd", positional[2])
	case len(positional) > 2:
		msg = fmt.Sprintf("unexpected argument %q: KEY and VALUE only before \"--\"", positional[2])
	case positional[0] == "":
		msg = "KEY must not be empty"
	case len(positional[1]) > core.MaxValueLen:
		msg = fmt.Sprintf("VALUE: %d bytes, at most %d", len(positional[1]), core.MaxValueLen)
	case len(command) == 0:
		msg = "no command given after --"
	case timingErr != nil:
		msg = timingErr.Error()
	default:
		cfg.key, cfg.value, cfg.command = positional[0], positional[1], command
		return runUnderLease(ctx, cfg, stdout, stderr)
	}
	usageError(stderr, "elect", msg)
	return exitUsage
}

// checkObserve returns what is wrong with an -observe command line (positional are its
// arguments; dashes tells whether it had "--"), or "".
func checkObserve(fs *flag.FlagSet, positional []string, dashes bool) string {
	var campaignFlag string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "ttl", "wait", "n", "nowait", "grace", "lock-delay":
			campaignFlag = f.Name
		}
	})
	switch {
	case len(positional) == 0:
		return "-observe: KEY is required"
	case len(positional) > 1:
		return fmt.Sprintf("-observe: unexpected argument %q: KEY only", positional[1])
	case dashes:
		return "-observe runs no command"
	case positional[0] == "":
		return "KEY must not be empty"
	case campaignFlag != "":
		return fmt.Sprintf("-observe and -%s: -%s is for a campaign", campaignFlag, campaignFlag)
	}
	return ""
}

// observeLeader prints the leader of cfg.key and each change, one line each, until ctx ends, and
// returns exitInterrupted then. A key that cannot be read at first is an error (exit 1); later,
// Observe retries a failed read without a word.
func observeLeader(ctx context.Context, cfg runConfig, stdout, stderr io.Writer) int {
	store, closeStore, err := cfg.store.connect(ctx, "elect", stderr, 1)
	if err != nil {
		if ctx.Err() != nil {
			return exitInterrupted
		}
		fmt.Fprintf(stderr, "leasehold elect: %v\n", err)
		return exitFail
	}
	defer closeStore()
	el, err := primitives.NewElection(store, cfg.key)
	if err != nil {
		fmt.Fprintf(stderr, "leasehold elect: %v\n", err)
		return exitUsage
	}
	if _, _, err := el.Leader(ctx); err != nil {
		if ctx.Err() != nil {
			return exitInterrupted
		}
		fmt.Fprintf(stderr, "leasehold elect: %v\n", err)
		return exitFail
	}
	for ld := range el.Observe(ctx) {
		fmt.Fprintln(stdout, leaderLine(ld))
	}
	return exitInterrupted
}

// leaderLine is how elect -observe prints ld: "leader term N holder H value "V"", or
// "no leader" for the zero Leader.
func leaderLine(ld primitives.Leader) string {
	if ld == (primitives.Leader{}) {
		return "no leader"
	}
	return fmt.Sprintf("leader term %d holder %s value %s", ld.Fence, plainOrQuoted(ld.Holder), strconv.Quote(ld.Value))
}

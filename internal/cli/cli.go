// Package cli is the leasehold command: its commands, their flags and help, and the stores they
// open. Command leasehold (cmd/leasehold) is Main and nothing else.
//
// It is a package, not the command's main package, so that a second leasehold binary can be built
// from it in another module: the etcd build (backend/etcd/cmd/leasehold, in the nested module
// backend/etcd) is this same command with the etcd driver added. The driver lives in a nested
// module so that etcd's client, gRPC and protobuf never enter this module's requirements, which
// is also why this module's leasehold cannot import it. Go's internal rule goes by import path,
// and backend/etcd/cmd/leasehold is under github.com/leasehold/leasehold, so it may import this
// package although it is in another module.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

// usage is the tool's help text, printed by --help, -h, help, and a bare `leasehold`; a build
// with Backends prints usageFor's instead.
const usage = `leasehold — distributed leases with fencing tokens: a Mutex and a weighted
Semaphore over a pluggable store (in memory, Redis, Valkey, Redlock,
PostgreSQL).

Usage:
  leasehold <command> [flags]

Commands:
  demo     run workers that share a weighted Semaphore and a Mutex on the
           in-memory store, let one lease expire to show how loss is reported,
           and check that no limit was exceeded and no fence went backwards
  run      run a command while holding a lease on a key in Redis or Valkey (or
           Redlock over several servers), or PostgreSQL:
           leasehold run -redis URL -key K -- cmd
  inspect  show who holds a key (holders, permits, fences, TTLs, values) and who
           waits for it
  elect    leader election: leasehold elect -redis URL KEY VALUE -- cmd runs cmd
           while leading (like run), leasehold elect -redis URL -observe KEY
           prints each change of leader
  version  print leasehold's version and the commit it was built from

run, inspect and elect take -redis as a URL or host:port, -driver goredis|valkey
(the client library) and -prefix (of the keys in Redis); or instead -postgres
as a URL or DSN, -pg-schema and -pg-prefix (where the tables are) and -pg-listen
(the DSN that LISTENs, behind a transaction pooler).
` + noEtcdUsage + `
Run 'leasehold <command> --help' (or 'leasehold help <command>') for a
command's flags.
`

// Exit statuses.
const (
	exitOK          = 0
	exitFail        = 1   // the command ran and found a problem, or could not run
	exitUsage       = 2   // bad command line
	exitInterrupted = 130 // SIGINT or SIGTERM ended the command early, as a shell reports ^C
)

// Main runs the command line in os.Args and returns its exit status, for the command's main to
// pass to os.Exit. run, inspect and elect can use each of backends as a store besides the
// built-in ones (see Backend). The first SIGINT or SIGTERM cancels the command's context so that
// it can stop cleanly; a second one kills the process as usual.
//
// A bad Backend is the program's error, not the user's: Main then says what is wrong with it on
// stderr and returns 1, whatever the command line.
func Main(backends ...Backend) int {
	if err := checkBackends(backends); err != nil {
		fmt.Fprintf(os.Stderr, "leasehold: %v\n", err)
		return exitFail
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop) // after the first signal, the default handling comes back
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, backends...)
	stop()
	return code
}

// usageFor is the tool's help text in a build with backends: usage, with their flags in place of
// the line that says where the etcd build is.
func usageFor(backends []Backend) string {
	if len(backends) == 0 {
		return usage
	}
	var b strings.Builder
	for _, be := range backends {
		b.WriteString(" This build also takes -" + be.Name + " URL instead (several endpoints of one store: repeated, or separated by commas)")
		if be.Flags != nil {
			fs := flag.NewFlagSet("", flag.ContinueOnError)
			be.Flags(fs)
			var own []string
			fs.VisitAll(func(f *flag.Flag) { own = append(own, "-"+f.Name) })
			if len(own) > 0 {
				b.WriteString(", with " + strings.Join(own, ", "))
			}
		}
		b.WriteString(".")
	}
	text := strings.Replace(usage, noEtcdUsage, "\n"+strings.Join(wrap(strings.TrimSpace(b.String()), "", "", 80), "\n")+"\n", 1)
	names := make([]string, len(backends))
	for i, be := range backends {
		names[i] = be.Name
	}
	return strings.Replace(text, "PostgreSQL).", "PostgreSQL, "+strings.Join(names, ", ")+").", 1)
}

// run executes the command line args, writing to stdout and stderr, and returns the exit status.
// run, inspect and elect can use backends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, backends ...Backend) int {
	if len(args) == 0 {
		// No command is a usage error, as with the go tool: the usage goes to stderr.
		fmt.Fprint(stderr, usageFor(backends))
		return exitUsage
	}
	switch cmd := args[0]; cmd {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usageFor(backends))
		return exitOK
	case "help":
		if len(args) == 1 {
			fmt.Fprint(stdout, usageFor(backends))
			return exitOK
		}
		if args[1] == "help" || strings.HasPrefix(args[1], "-") || len(args) > 2 {
			fmt.Fprintf(stderr, "leasehold help: takes one command name; run 'leasehold --help' for usage\n")
			return exitUsage
		}
		return run(ctx, []string{args[1], "--help"}, stdout, stderr, backends...)
	case "demo":
		return demoCommand(ctx, args[1:], stdout, stderr)
	case "run":
		return runCommand(ctx, args[1:], stdout, stderr, backends)
	case "inspect":
		return inspectCommand(ctx, args[1:], stdout, stderr, backends)
	case "elect":
		return electCommand(ctx, args[1:], stdout, stderr, backends)
	case "version":
		return versionCommand(ctx, args[1:], stdout, stderr)
	default:
		what := "command"
		if strings.HasPrefix(cmd, "-") {
			what = "flag"
		}
		fmt.Fprintf(stderr, "leasehold: unknown %s %q; run 'leasehold --help' for usage\n", what, cmd)
		return exitUsage
	}
}

// parseFlags parses args into fs. On -h or --help it prints fs's usage to stdout; on a bad flag
// or a stray argument, one line to stderr. ok reports whether the command should go on; when it
// is false, code is the exit status.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (ok bool, code int) {
	if ok, code := parseOnly(fs, args, stdout, stderr); !ok {
		return false, code
	}
	if fs.NArg() > 0 {
		usageError(stderr, fs.Name(), fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
		return false, exitUsage
	}
	return true, exitOK
}

// parseOnly is parseFlags that leaves the arguments after the flags in fs.Args().
func parseOnly(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (ok bool, code int) {
	fs.SetOutput(io.Discard) // the flag package's own messages are replaced by the ones below
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return false, exitOK
	case err != nil && missingDriver(fs, err) != "":
		fmt.Fprintf(stderr, "leasehold %s: %s\n", fs.Name(), missingDriver(fs, err))
		return false, exitUsage
	case err != nil:
		usageError(stderr, fs.Name(), err.Error())
		return false, exitUsage
	}
	return true, exitOK
}

// parseInterleaved is parseFlags for a command whose arguments may come before, between or
// after its flags; it returns the arguments in order. Everything after "--" is an argument.
func parseInterleaved(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (positional []string, ok bool, code int) {
	for {
		if ok, code := parseOnly(fs, args, stdout, stderr); !ok {
			return nil, false, code
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, true, exitOK
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(positional, rest...), true, exitOK
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
}

// parseRunFlags parses the flags of `leasehold run`, which come before "--", and returns the
// command after it, as parseFlags does. A word where a flag should be (a command given without
// "--") is a usage error that says where the command goes.
func parseRunFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (command []string, ok bool, code int) {
	flags := args
	if i := slices.Index(args, "--"); i >= 0 {
		flags, command = args[:i], args[i+1:]
	}
	if ok, code := parseOnly(fs, flags, stdout, stderr); !ok {
		return nil, false, code
	}
	if fs.NArg() > 0 {
		usageError(stderr, fs.Name(), fmt.Sprintf("unexpected argument %q: the command goes after \"--\", as in leasehold %s [flags] -- %s",
			fs.Arg(0), fs.Name(), strings.Join(fs.Args(), " ")))
		return nil, false, exitUsage
	}
	return command, true, exitOK
}

// usageError prints msg about command cmd as one line on stderr, with a hint to its help.
func usageError(stderr io.Writer, cmd, msg string) {
	fmt.Fprintf(stderr, "leasehold %s: %s; run 'leasehold %s --help' for usage\n", cmd, msg, cmd)
}

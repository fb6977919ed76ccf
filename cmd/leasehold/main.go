// Command leasehold is Leasehold's command-line tool.
//
//	leasehold demo [flags]   run workers sharing a Semaphore and a Mutex on the in-memory store
//
// Run `leasehold --help` or `leasehold demo --help` for details.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `leasehold — distributed leases (mutex, weighted semaphore) with fencing tokens.

Usage:
  leasehold <command> [flags]

Commands:
  demo    run workers that share a weighted Semaphore and a Mutex on the embedded
          in-memory store, print every grant with its fence, let one lease expire to
          show loss detection, and check that the limit was never exceeded

Run 'leasehold <command> --help' for a command's flags.
`

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and found a problem
	exitUsage = 2 // bad command line
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "demo":
		return runDemoCommand(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "leasehold: unknown command %q (run 'leasehold --help')\n", args[0])
		return exitUsage
	}
}

// parseFlags parses args into fs; it prints the usage on --help and one line on a bad flag.
// The boolean result says whether to go on; when false, the int is the exit status.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (bool, int) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return false, exitOK
	case err != nil:
		fmt.Fprintf(stderr, "leasehold %s: %v (run 'leasehold %s --help')\n", fs.Name(), err, fs.Name())
		return false, exitUsage
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "leasehold %s: unexpected argument %q (run 'leasehold %s --help')\n", fs.Name(), fs.Arg(0), fs.Name())
		return false, exitUsage
	}
	return true, exitOK
}

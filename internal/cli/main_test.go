package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testenv"
)

// TestMain runs the package's tests, up to 8 parallel ones at once, stops its PostgreSQL server
// after them, and fails them if any goroutine outlives them. Run with LEASEHOLD_AS_CLI=1, the test binary is the leasehold
// command, for end-to-end tests; with LEASEHOLD_AS_CLI=fake, it is that command built with a
// Backend, as the etcd build is (see asCLIWithFake).
func TestMain(m *testing.M) {
	switch os.Getenv("LEASEHOLD_AS_CLI") {
	case "1":
		os.Exit(Main())
	case "fake":
		os.Exit(asCLIWithFake())
	}
	// The parallel tests mostly wait, not compute: for the CLI's timeouts on servers that do not
	// answer, and for the processes they start. Unless -parallel says otherwise, more of them
	// run at once than the machine has CPUs, go test's default.
	testenv.ParallelWaiters(8)
	code := m.Run()
	if pgShared.srv != nil {
		pgShared.srv.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// runArgs runs the command line args and returns its exit status, stdout and stderr.
func runArgs(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelpPrintsUsage(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-help"}, {"-h"}, {"help"}} {
		code, out, errOut := runArgs(t, context.Background(), args...)
		if code != exitOK || out != usage || errOut != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and the usage on stdout", args, code, out, errOut, exitOK)
		}
	}
	if !strings.Contains(usage, "demo") {
		t.Errorf("the usage does not list the demo command:\n%s", usage)
	}
}

func TestNoArgumentsPrintsUsageAsAnError(t *testing.T) {
	code, out, errOut := runArgs(t, context.Background())
	if code != exitUsage || out != "" || errOut != usage {
		t.Errorf("no arguments: exit %d, stdout %q, stderr %q; want %d and the usage on stderr", code, out, errOut, exitUsage)
	}
}

func TestDemoHelp(t *testing.T) {
	for _, args := range [][]string{{"demo", "--help"}, {"demo", "-h"}, {"help", "demo"}} {
		code, out, errOut := runArgs(t, context.Background(), args...)
		if code != exitOK || errOut != "" {
			t.Errorf("%q: exit %d, stderr %q; want %d and nothing on stderr", args, code, errOut, exitOK)
		}
		for _, want := range []string{
			"Usage: leasehold demo",
			"-workers int", "(default 6)",
			"-limit int", "(default 3)",
			"-duration duration", "(default 2.5s)",
			"-ttl duration", "(default 1s)",
			"core.ErrLost", "Exit status",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%q does not say %q:\n%s", args, want, out)
			}
		}
	}
}

func TestBadCommandLinesExitWithOneLine(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the one line on stderr
	}{
		{[]string{"dmeo"}, `leasehold: unknown command "dmeo"`},
		{[]string{"-v"}, `leasehold: unknown flag "-v"`},
		{[]string{"help", "nope"}, `leasehold: unknown command "nope"`},
		{[]string{"help", "demo", "extra"}, "leasehold help: takes one command name"},
		{[]string{"demo", "-limit", "0"}, "leasehold demo: -limit 0: must be at least 1"},
		{[]string{"demo", "-workers", "0"}, "leasehold demo: -workers 0: must be at least 1"},
		{[]string{"demo", "-workers", "-3"}, "leasehold demo: -workers -3: must be at least 1"},
		{[]string{"demo", "-duration", "0s"}, "leasehold demo: -duration 0s: must be positive"},
		{[]string{"demo", "-ttl", "5ms"}, "leasehold demo: -ttl 5ms: must be at least 10ms"},
		{[]string{"demo", "-limit", "many"}, `leasehold demo: invalid value "many" for flag -limit`},
		{[]string{"demo", "-nope"}, "leasehold demo: flag provided but not defined: -nope"},
		{[]string{"demo", "extra"}, `leasehold demo: unexpected argument "extra"`},
	}
	checkUsageErrors(t, tests)
}

// checkUsageErrors runs each command line and checks it is refused as bad usage: exit 2, one line
// on stderr starting with want and pointing to --help, nothing on stdout (nothing ran).
func checkUsageErrors(t *testing.T, tests []struct {
	args []string
	want string
}) {
	t.Helper()
	for _, tc := range tests {
		code, out, errOut := runArgs(t, context.Background(), tc.args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want %d", tc.args, code, exitUsage)
		}
		if !strings.HasPrefix(errOut, tc.want) || !strings.Contains(errOut, "--help") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: stderr %q, want one line starting %q with a hint to --help", tc.args, errOut, tc.want)
		}
		if out != "" {
			t.Errorf("%q: stdout %q, want nothing: the command must not run", tc.args, out)
		}
	}
}

func TestDemoCommandPasses(t *testing.T) {
	t.Parallel()
	code, out, errOut := runArgs(t, context.Background(), "demo", "-duration", "500ms", "-workers", "4", "-limit", "2")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q; want %d\n%s", code, errOut, exitOK, out)
	}
	if !strings.Contains(out, "result                 OK") {
		t.Errorf("no OK result in:\n%s", out)
	}
}

func TestDemoCommandInterruptedExits130(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	code, out, errOut := runArgs(t, ctx, "demo", "-duration", "1h")
	if code != exitInterrupted || !strings.Contains(errOut, "interrupted") {
		t.Errorf("exit %d, stderr %q; want %d and a word about the interrupt\n%s", code, errOut, exitInterrupted, out)
	}
}

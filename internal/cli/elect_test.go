package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/internal/poll"
)

func TestBadElectCommandLines(t *testing.T) {
	r := "127.0.0.1:6379"
	tests := []struct {
		args []string
		want string // in the one line on stderr
	}{
		{[]string{"elect", "k", "v", "--", "true"}, "leasehold elect: -redis or -postgres is required"},
		{[]string{"elect", "-redis", r, "k", "--", "true"}, "leasehold elect: KEY and VALUE are required"},
		{[]string{"elect", "-redis", r, "k", "v", "echo", "hi"}, `leasehold elect: unexpected argument "echo": the command goes after "--"`},
		{[]string{"elect", "-redis", r, "k", "v", "x", "--", "true"}, `leasehold elect: unexpected argument "x": KEY and VALUE only`},
		{[]string{"elect", "-redis", r, "", "v", "--", "true"}, "leasehold elect: KEY must not be empty"},
		{[]string{"elect", "-redis", r, "k", "v"}, "leasehold elect: no command given after --"},
		{[]string{"elect", "-redis", r, "k", "v", "--"}, "leasehold elect: no command given after --"},
		{[]string{"elect", "-redis", r, "-n", "-wait", "1s", "k", "v", "--", "true"}, "leasehold elect: -n and -wait: give one"},
		{[]string{"elect", "-redis", r, "-ttl", "1ms", "k", "v", "--", "true"}, "leasehold elect: -ttl 1ms: must be at least 10ms"},
		{[]string{"elect", "-redis", r, "-observe"}, "leasehold elect: -observe: KEY is required"},
		{[]string{"elect", "-redis", r, "-observe", "k", "v"}, `leasehold elect: -observe: unexpected argument "v": KEY only`},
		{[]string{"elect", "-redis", r, "-observe", "k", "--", "true"}, "leasehold elect: -observe runs no command"},
		{[]string{"elect", "-redis", r, "-observe", "-n", "k"}, "leasehold elect: -observe and -n: -n is for a campaign"},
		{[]string{"elect", "-redis", r, "-nope", "k"}, "leasehold elect: flag provided but not defined: -nope"},
	}
	checkUsageErrors(t, tests)
}

func TestElectHelp(t *testing.T) {
	for _, args := range [][]string{{"elect", "--help"}, {"help", "elect"}} {
		code, out, errOut := runArgs(t, context.Background(), args...)
		if code != exitOK || errOut != "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
		for _, want := range []string{
			"Usage: leasehold elect -redis URL|-postgres URL [flags] KEY VALUE -- command", "-observe KEY",
			"leader term 17 holder", "no leader", "until it is", "process group", "LEASEHOLD_FENCE (the term)", "resigns",
			"Exit status", fmt.Sprint(exitBusy), fmt.Sprint(exitLost), fmt.Sprint(exitInterrupted), fmt.Sprint(exitCannotStart),
			"-wait duration", "-n\ttry once", "-grace duration", "-ttl duration", "-driver string", "-prefix string",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%q does not say %q:\n%s", args, want, out)
			}
		}
	}
	if _, out, _ := runArgs(t, context.Background(), "--help"); !strings.Contains(out, "elect ") || !strings.Contains(out, "-observe") {
		t.Errorf("leasehold --help does not list elect:\n%s", out)
	}
}

// leaderRE matches a line of elect -observe about a leader.
var leaderRE = regexp.MustCompile(`^leader term (\d+) holder [0-9a-f]{32} value (".*")$`)

// observed is a line of elect -observe: a leader's term and quoted value, or no leader (term 0).
type observed struct {
	term  uint64
	value string
}

// parseObserved parses the lines of elect -observe, failing the test on a line it does not know.
func parseObserved(t *testing.T, out string) []observed {
	t.Helper()
	var got []observed
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "no leader" {
			got = append(got, observed{})
			continue
		}
		m := leaderRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("elect -observe printed %q, neither a leader nor \"no leader\":\n%s", line, out)
		}
		term, _ := strconv.ParseUint(m[1], 10, 64)
		got = append(got, observed{term: term, value: m[2]})
	}
	return got
}

// outputOf returns a condition for poll.For: out so far, and whether cond holds of it.
func outputOf(out fmt.Stringer, cond func(string) bool) func() (string, bool) {
	return func() (string, bool) {
		s := out.String()
		return s, cond(s)
	}
}

// lines returns a condition: the output has n complete lines.
func lines(n int) func(string) bool {
	return func(s string) bool { return strings.Count(s, "\n") == n }
}

func TestElectObserveSeesLeadersComeAndGo(t *testing.T) {
	useMemoryStore(t)
	observer := start(t, "elect", "-redis", memoryRedis, "-observe", "job")
	poll.For(t, "no leader at first", outputOf(&observer.out, lines(1)))

	cmd1, open1 := gate(t)
	first := start(t, append([]string{"elect", "-redis", memoryRedis, "job", "host-a: deploy", "--"}, cmd1...)...)
	poll.For(t, "the first leader", outputOf(&observer.out, lines(2)))
	cmd2, open2 := gate(t)
	second := start(t, append([]string{"elect", "-redis", memoryRedis, "job", "host-b\nforged", "--"}, cmd2...)...)
	inspectUntil(t, "job", "1 waiting")
	open1()
	poll.For(t, "the second leader", outputOf(&observer.out, lines(3)))
	open2()
	out := poll.For(t, "no leader after the second resigned", outputOf(&observer.out, lines(4)))

	got := parseObserved(t, out)
	want := []observed{{}, {value: `"host-a: deploy"`}, {value: `"host-b\nforged"`}, {}}
	for i := range want {
		if got[i].value != want[i].value || (got[i].term == 0) != (want[i].value == "") {
			t.Errorf("line %d: %+v, want value %s\n%s", i+1, got[i], want[i].value, out)
		}
	}
	if got[2].term <= got[1].term {
		t.Errorf("the second term %d is not above the first %d", got[2].term, got[1].term)
	}
	for _, s := range []*started{first, second} {
		if code := s.exit(t); code != exitOK {
			t.Errorf("elect: exit %d, stderr %q", code, s.err.String())
		}
	}
	observer.cancel()
	if code := observer.exit(t); code != exitInterrupted || observer.err.String() != "" {
		t.Errorf("observer interrupted: exit %d, stderr %q; want %d and nothing on stderr", code, observer.err.String(), exitInterrupted)
	}
}

// startCLI starts the leasehold command with args, its output in out, and returns it with a
// pipe to its stdin; the test's end kills it if it is still running.
func startCLI(t *testing.T, out *syncBuffer, args ...string) (*cliProcess, io.WriteCloser) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := cli(ctx, args...)
	cmd.Stdout, cmd.Stderr = out, out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &cliProcess{pid: cmd.Process.Pid, signal: cmd.Process.Signal, done: make(chan int, 1)}
	go func() {
		cmd.Wait()
		p.done <- cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		cancel()
		stdin.Close()
	})
	return p, stdin
}

// cliProcess is a leasehold process a test started.
type cliProcess struct {
	pid    int
	signal func(os.Signal) error
	done   chan int // receives its exit status
}

func TestElectRunsTheCommandAsLeaderAndHandsOver(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	var out1, out2 syncBuffer
	first, stdin1 := startCLI(t, &out1, "elect", "-redis", url, "job", "one", "--", "sh", "-c", `echo "one $LEASEHOLD_FENCE"; read x; exit 0`)
	poll.For(t, "the first leading", outputOf(&out1, lines(1)))
	second, _ := startCLI(t, &out2, "elect", "-redis", url, "job", "two", "--", "sh", "-c", `echo "two $LEASEHOLD_FENCE"`)
	waitForWaiters(t, srv.Addr, 1)
	if s := out2.String(); s != "" {
		t.Fatalf("the second ran while the first led: %q", s)
	}
	stdin1.Close()
	for i, p := range []*cliProcess{first, second} {
		select {
		case code := <-p.done:
			if code != exitOK {
				t.Errorf("elect %d: exit %d; output %q %q", i+1, code, out1.String(), out2.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("elect %d still running: %q %q", i+1, out1.String(), out2.String())
		}
	}
	var term1, term2 uint64
	if _, err := fmt.Sscanf(out1.String(), "one %d\n", &term1); err != nil {
		t.Fatalf("first: %q: %v", out1.String(), err)
	}
	if _, err := fmt.Sscanf(out2.String(), "two %d\n", &term2); err != nil || term2 <= term1 {
		t.Errorf("second: %q (%v), want a term above the first's %d", out2.String(), err, term1)
	}
	waitInspect(t, url, "job", "1", "0 holder(s)") // the second resigned too
}

func TestElectObserveOnRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	var obs, out syncBuffer
	observer, _ := startCLI(t, &obs, "elect", "-redis", url, "-observe", "job")
	poll.For(t, "no leader at first", outputOf(&obs, lines(1)))
	_, stdin := startCLI(t, &out, "elect", "-redis", url, "job", "v", "--", "sh", "-c", "read x")
	poll.For(t, "a leader", outputOf(&obs, lines(2)))
	stdin.Close()
	got := parseObserved(t, poll.For(t, "no leader after the resignation", outputOf(&obs, lines(3))))
	if got[0].term != 0 || got[1].term == 0 || got[2].term != 0 {
		t.Errorf("observed %+v, want no leader, a leader, no leader", got)
	}
	if err := observer.signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := <-observer.done; code != exitInterrupted {
		t.Errorf("observer after SIGINT: exit %d, want %d; output %q", code, exitInterrupted, obs.String())
	}
}

func TestElectStopsTheCommandWhenLeadershipIsLost(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	var out syncBuffer
	p, _ := startCLI(t, &out, "elect", "-redis", url, "-ttl", "3s", "-grace", "400ms", "job", "v", "--", "sleep", "30")
	waitInspect(t, url, "job", "1", "1 holder(s)")
	if _, err := redistest.Do(srv.Addr, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-p.done:
		if code != exitLost || !strings.Contains(out.String(), "lost") {
			t.Errorf("exit %d, output %q; want %d and a line saying the leadership was lost", code, out.String(), exitLost)
		}
	case <-time.After(20 * time.Second): // -ttl 3s, -grace 400ms: not its sleep's 30s
		t.Fatalf("the command still runs 20s after its leadership was lost: %q", out.String())
	}
}

func TestElectWithALeaderAndNoWaitIsBusy(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	var out syncBuffer
	startCLI(t, &out, "elect", "-redis", url, "job", "v", "--", "sh", "-c", "read x")
	waitInspect(t, url, "job", "1", "1 holder(s)")
	for _, tc := range []struct {
		flag, want string
	}{
		{"-n", `leasehold elect: "job" has a leader (held by "v")` + "\n"},
		{"-wait=300ms", `leasehold elect: "job" has a leader (held by "v"): not acquired within 300ms` + "\n"},
	} {
		code, stdout, stderr := runArgs(t, t.Context(), "elect", "-redis", url, tc.flag, "job", "w", "--", "echo", "ran")
		if code != exitBusy || stdout != "" || stderr != tc.want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d and %q", tc.flag, code, stdout, stderr, exitBusy, tc.want)
		}
	}
}

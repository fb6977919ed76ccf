package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// storeFlag returns the flag that names the store at url: -postgres for a postgres:// URL, else
// -redis.
func storeFlag(url string) []string {
	if strings.HasPrefix(url, "postgres://") {
		return []string{"-postgres", url}
	}
	return []string{"-redis", url}
}

// cli runs the test binary as the leasehold command.
func cli(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "LEASEHOLD_AS_CLI=1")
	return cmd
}

func TestRunNeverOverlapsOnOneKey(t *testing.T) {
	t.Parallel() // its runs are waited out
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		runNeverOverlaps(t, "redis://"+redistest.StartServer(t).Addr, "e2e")
	})
	t.Run("postgres", func(t *testing.T) {
		testenv.SkipShort(t, "starts PostgreSQL")
		t.Parallel()
		runNeverOverlaps(t, pgServer(t).URL, unique("e2e"))
	})
}

// runNeverOverlaps runs two processes, each running leasehold run four times (twice under
// -short) on key of the store at url with a command that logs its start and end, and checks that
// no two runs overlap.
func runNeverOverlaps(t *testing.T, url, key string) {
	rounds := 4
	if testing.Short() {
		rounds = 2
	}
	runsNeverOverlap(t, storeFlag(url), rounds, []string{"-key", key}, []string{"-key", key})
}

// runsNeverOverlap runs a process for each of keyArgs, each running leasehold run rounds times
// with those -key flags on the store that storeArgs name, with a command that logs its start and
// end, and checks that no two runs overlap.
func runsNeverOverlap(t *testing.T, storeArgs []string, rounds int, keyArgs ...[]string) {
	log := filepath.Join(t.TempDir(), "intervals")
	script := fmt.Sprintf(`echo start $(date +%%s%%N) >> %s; sleep 0.1; echo end $(date +%%s%%N) >> %s`, log, log)
	var wg sync.WaitGroup
	for p, keys := range keyArgs {
		wg.Go(func() {
			for i := range rounds {
				args := append(append(append([]string{"run"}, storeArgs...), keys...), "-wait", "30s", "--", "sh", "-c", script)
				out, err := cli(t.Context(), args...).CombinedOutput()
				if err != nil {
					t.Errorf("process %d run %d: %v\n%s", p, i, err, out)
				}
			}
		})
	}
	wg.Wait()
	checkNoOverlap(t, log, rounds*len(keyArgs))
}

// checkNoOverlap reads the start and end lines that commands wrote to log and checks that want
// commands ran to their end, one at a time.
func checkNoOverlap(t *testing.T, log string, want int) {
	t.Helper()
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	type span struct{ start, end int64 }
	var spans []span
	var open int64 = -1
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		ts, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "start":
			if open >= 0 {
				t.Fatalf("a command started while another was running:\n%s", data)
			}
			open = ts
		case "end":
			spans = append(spans, span{open, ts})
			open = -1
		}
	}
	if len(spans) != want {
		t.Fatalf("%d complete runs, want %d:\n%s", len(spans), want, data)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	for i := 1; i < len(spans); i++ {
		if spans[i].start < spans[i-1].end {
			t.Errorf("runs overlap: %v and %v", spans[i-1], spans[i])
		}
	}
}

func TestRunExitStatuses(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	status := func(cmd *exec.Cmd) (int, string) {
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if code, out := status(cli(t.Context(), "run", "-redis", url, "-key", "s", "--", "sh", "-c", "exit 7")); code != 7 {
		t.Errorf("command exiting 7: leasehold exited %d\n%s", code, out)
	}
	if code, out := status(cli(t.Context(), "run", "-redis", url, "-key", "s", "--", "/nonexistent/command")); code != exitCannotStart || !strings.Contains(out, "/nonexistent/command") {
		t.Errorf("command that cannot start: leasehold exited %d, %q; want %d", code, out, exitCannotStart)
	}
	hctx, stop := context.WithCancel(t.Context())
	holder := cli(hctx, "run", "-redis", url, "-key", "busy", "-wait", "30s", "--", "sleep", "30")
	var hout strings.Builder
	holder.Stdout, holder.Stderr = &hout, &hout
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	defer stop()
	busy := poll.For(t, "run -n to find the key busy", func() (string, bool) {
		code, out := status(cli(t.Context(), "run", "-redis", url, "-key", "busy", "-n", "--", "true"))
		return fmt.Sprintf("exit %d: %s", code, out), code == exitBusy
	})
	if !strings.Contains(busy, `"busy" is busy`) || strings.Count(busy, "\n") != 1 {
		t.Errorf("busy: %q, want one clear line", busy)
	}
	for _, flag := range []string{"-nowait", "-wait=0"} {
		if code, out := status(cli(t.Context(), "run", "-redis", url, "-key", "busy", flag, "--", "true")); code != exitBusy || strings.Count(out, "\n") != 1 {
			t.Errorf("%s on a busy key: exit %d, %q; want %d and one line", flag, code, out, exitBusy)
		}
	}
	code, out := status(cli(t.Context(), "run", "-redis", "redis://127.0.0.1:1", "-key", "k", "--", "true"))
	if code != exitFail || strings.Count(out, "\n") != 1 || !strings.Contains(out, "unreachable") {
		t.Errorf("unreachable server: exit %d, %q; want %d and one line", code, out, exitFail)
	}
	code, out = status(cli(t.Context(), "run", "-redis", url, "-key", "k", "-limit", "0", "--", "true"))
	if code != exitUsage || !strings.Contains(out, "-limit 0") {
		t.Errorf("bad flag: exit %d, %q", code, out)
	}
	code, out = status(cli(t.Context(), "run", "-redis", url, "-key", "k", "-n", "-wait", "5s", "--", "true"))
	if code != exitUsage || !strings.Contains(out, "-n and -wait") {
		t.Errorf("-n with -wait: exit %d, %q; want %d", code, out, exitUsage)
	}
}

func TestRunStopsCommandWhenLeaseIsLost(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	cmd := cli(t.Context(), "run", "-redis", url, "-key", "lost", "-ttl", "3s", "-grace", "400ms", "--", "sleep", "30")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitInspect(t, url, "lost", "1", "1 holder(s)")
	// Someone deletes the lease's keys behind its back.
	if _, err := redistest.Do(srv.Addr, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd.Wait()
	if d := time.Since(start); d > 15*time.Second { // -ttl 3s, -grace 400ms: not its sleep's 30s
		t.Errorf("the command ran %v after its lease was lost", d)
	}
	if code := cmd.ProcessState.ExitCode(); code != exitLost || !strings.Contains(out.String(), "lost") {
		t.Errorf("exit %d, output %q; want %d and a line saying the lease was lost", code, out.String(), exitLost)
	}
}

func TestInspectShowsHolders(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	hctx, stop := context.WithCancel(t.Context())
	holder := cli(hctx, "run", "-redis", url, "-key", "shown", "-limit", "3", "-permits", "2", "-wait", "30s", "--", "sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	defer stop()
	waitInspect(t, url, "shown", "3", "1 holder(s), 2 permit(s) in use, 1 free of 3")
}

// waitInspect polls `leasehold inspect` of key with limit until its output contains want.
func waitInspect(t *testing.T, url, key, limit, want string) {
	t.Helper()
	poll.For(t, fmt.Sprintf("inspect %s showing %q", key, want), func() (string, bool) {
		args := append(append([]string{"inspect"}, storeFlag(url)...), "-limit", limit, key)
		out, err := cli(t.Context(), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("inspect: %v\n%s", err, out)
		}
		return string(out), strings.Contains(string(out), want)
	})
}

func TestRunStopsCommandIgnoringTermAfterGrace(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	cmd := cli(t.Context(), "run", "-redis", url, "-key", "stubborn", "-ttl", "3s", "-grace", "300ms", "--", "sh", "-c", "trap '' TERM; sleep 30")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitInspect(t, url, "stubborn", "1", "1 holder(s)")
	if _, err := redistest.Do(srv.Addr, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitLost || !strings.Contains(out.String(), "SIGKILL") {
		t.Errorf("exit %d, output %q; want %d and a line saying SIGKILL followed -grace", code, out.String(), exitLost)
	}
}

// holdKey starts `leasehold run` holding key until the returned func is called, which waits for
// it to exit.
func holdKey(t *testing.T, url, key string) (release func()) {
	t.Helper()
	holder := cli(t.Context(), "run", "-redis", url, "-key", key, "--", "sh", "-c", "read x; exit 0")
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	release = sync.OnceFunc(func() {
		stdin.Close()
		holder.Wait()
	})
	t.Cleanup(release)
	waitInspect(t, url, key, "1", "1 holder(s)")
	return release
}

// waitForWaiters polls until n processes wait on the server at addr: subscribed to a key's
// release channel, which a waiter does after its first refused try.
func waitForWaiters(t *testing.T, addr string, n int) {
	t.Helper()
	want := fmt.Sprintf("*%d", n)
	poll.For(t, fmt.Sprintf("%d waiter(s) subscribed: PUBSUB CHANNELS %s", n, want), func() (string, bool) {
		got, err := redistest.Do(addr, "PUBSUB", "CHANNELS")
		if err != nil {
			t.Fatal(err)
		}
		return got, strings.TrimSpace(got) == want
	})
}

func TestRunWaitsForTheLeaseByDefault(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	release := holdKey(t, url, "queue")
	waiter := cli(t.Context(), "run", "-redis", url, "-key", "queue", "--", "echo", "ran")
	var out strings.Builder
	waiter.Stdout, waiter.Stderr = &out, &out
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	waitForWaiters(t, srv.Addr, 1)
	release()
	waiter.Wait()
	if code := waiter.ProcessState.ExitCode(); code != 0 || out.String() != "ran\n" {
		t.Errorf("exit %d, output %q; want 0 and the command's output once the key was free", code, out.String())
	}
}

func TestRunWaitGivesUpAfterItsBound(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	holdKey(t, url, "bounded")
	start := time.Now()
	cmd := cli(t.Context(), "run", "-redis", url, "-key", "bounded", "-wait", "300ms", "--", "true")
	out, _ := cmd.CombinedOutput() // its error only repeats the exit status, checked below
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("gave up after %v, before -wait 300ms", d)
	}
	// The holder is named by its default value: host, pid and command.
	if code := cmd.ProcessState.ExitCode(); code != exitBusy || !regexp.MustCompile(`"bounded" is busy \(held by ".+ pid \d+: sh -c 'read x; exit 0'"\): not acquired within 300ms`).Match(out) {
		t.Errorf("exit %d, output %q; want %d and the busy line naming the holder and -wait", code, out, exitBusy)
	}
}

func TestRunInterruptedWhileWaitingExits130(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	holdKey(t, url, "interrupted")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		waitForWaiters(t, srv.Addr, 0) // the previous waiter's subscription is gone
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		waiter := cli(ctx, "run", "-redis", url, "-key", "interrupted", "--", "echo", "ran")
		var out strings.Builder
		waiter.Stdout, waiter.Stderr = &out, &out
		if err := waiter.Start(); err != nil {
			t.Fatal(err)
		}
		waitForWaiters(t, srv.Addr, 1)
		if err := waiter.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		waiter.Wait()
		cancel()
		if code := waiter.ProcessState.ExitCode(); code != exitInterrupted || !strings.Contains(out.String(), "interrupted while waiting") {
			t.Errorf("%v while waiting: exit %d, output %q; want %d and a line saying so", sig, code, out.String(), exitInterrupted)
		}
	}
}

func TestRunHelpDocumentsWaitingAndStatuses(t *testing.T) {
	code, out, errOut := runArgs(t, context.Background(), "run", "--help")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q; want %d", code, errOut, exitOK)
	}
	for _, want := range []string{
		"waiting until it is free", "-n\ttry once", "-nowait", "-wait duration", "0 is -n",
		"process group", "Exit status", fmt.Sprint(exitBusy), fmt.Sprint(exitLost), fmt.Sprint(exitInterrupted), fmt.Sprint(exitCannotStart),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("run --help does not say %q:\n%s", want, out)
		}
	}
}

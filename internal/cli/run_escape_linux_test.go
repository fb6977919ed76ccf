//go:build linux

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// alive reports whether pid is a process that has not ended.
func alive(t *testing.T, pid int) bool {
	for _, p := range procs(t) {
		if p.pid == pid && p.state != 'Z' && p.state != 'X' {
			return true
		}
	}
	return false
}

// readPid waits for file to hold a pid and returns it.
func readPid(t *testing.T, file string) int {
	t.Helper()
	var pid int
	poll.Until(t, "a pid in "+file, func() bool {
		data, err := os.ReadFile(file)
		if err != nil || !strings.HasSuffix(string(data), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	return pid
}

func TestRunNestedRunWithAnotherKey(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	out, err := cli(t.Context(), "run", "-redis", url, "-key", "outer", "--",
		os.Args[0], "run", "-redis", url, "-key", "inner", "--",
		"sh", "-c", `echo "inner fence=$LEASEHOLD_FENCE sup=${LEASEHOLD_RUN_SUPERVISOR-unset}"; exit 7`).CombinedOutput()
	if code := exitCodeOf(err); code != 7 || !strings.Contains(string(out), "sup=unset") {
		t.Errorf("nested run: exit %d, output %q; want 7 and the inner command's line", code, out)
	}
}

func exitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(interface{ ExitCode() int }); ok {
		return ee.ExitCode()
	}
	return -1
}

func TestRunPassesTheCommandsOwnStatuses(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	for _, code := range []int{exitBusy, exitLost, exitInterrupted, exitCannotStart, 0, 1, 2} {
		out, err := cli(t.Context(), "run", "-redis", url, "-key", "st", "--", "sh", "-c", "exit "+strconv.Itoa(code)).CombinedOutput()
		if got := exitCodeOf(err); got != code || len(out) != 0 {
			t.Errorf("command exiting %d: run exited %d, output %q", code, got, out)
		}
	}
}

func TestRunHugeWait(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	for _, w := range []string{"2562047h", "2562047h47m16.854775807s"} {
		out, err := cli(t.Context(), "run", "-redis", url, "-key", "w", "-wait", w, "--", "true").CombinedOutput()
		if code := exitCodeOf(err); code != 0 {
			t.Errorf("-wait %s on a free key: exit %d, %q", w, code, out)
		}
	}
	out, err := cli(t.Context(), "run", "-redis", url, "-key", "w", "-wait", "99999999h", "--", "true").CombinedOutput()
	if code := exitCodeOf(err); code != exitUsage {
		t.Errorf("-wait 99999999h: exit %d, %q; want a usage error", code, out)
	}
}

func TestRunSupervisorKilled(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := cli(t.Context(), "run", "-redis", url, "-key", "sk", "--", "sh", "-c", "sleep 300 & echo $! > "+pidFile+"; sleep 300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sleepPid := readPid(t, pidFile)
	var sup int
	for _, p := range procs(t) {
		if p.ppid == cmd.Process.Pid {
			sup = p.pid
		}
	}
	if sup == 0 {
		t.Fatal("no supervisor")
	}
	syscall.Kill(sup, syscall.SIGKILL)
	err := cmd.Wait()
	if alive(t, sleepPid) {
		t.Errorf("when run exited, the command's sleep %d was alive", sleepPid)
	}
	if code := exitCodeOf(err); code != 128+9 {
		t.Errorf("supervisor killed: run exited %d", code)
	}
	code, out, _ := runArgs(t, t.Context(), "inspect", "-redis", url, "sk")
	if code != 0 || !strings.HasPrefix(out, "sk: 0 holder(s)") {
		t.Errorf("after run exited: %q", out)
	}
}

// A command that leaves a nested run behind: when the outer run has exited (and released its
// lease), nothing the outer command started may be alive, the inner run's command included.
func TestRunNestedRunLeftBehindDiesBeforeRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	rounds := 5 // each a chance for the inner run to outlive the outer one
	if testing.Short() {
		rounds = 2
	}
	for i := range rounds {
		pidFile := filepath.Join(t.TempDir(), "pid")
		script := os.Args[0] + " run -redis " + url + " -key inner" + strconv.Itoa(i) + " -- sh -c 'echo $$ > " + pidFile + "; exec sleep 300' & " +
			"while ! test -s " + pidFile + "; do sleep 0.01; done; exit 0"
		out, err := cli(t.Context(), "run", "-redis", url, "-key", "outer", "--", "sh", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("%v %s", err, out)
		}
		pid := readPid(t, pidFile)
		if alive(t, pid) {
			t.Errorf("round %d: the outer run exited, its lease released, while the inner command %d was alive", i, pid)
		}
		poll.Until(t, "the inner command dies", func() bool { return !alive(t, pid) })
	}
}

// A command that leaves its process group (setsid) must still not outlive run.
func TestRunSetsidEscape(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	out, err := cli(t.Context(), "run", "-redis", "redis://"+srv.Addr, "-key", "esc", "--", "sh", "-c",
		"setsid sh -c 'echo $$ > "+pidFile+"; exec sleep 300' </dev/null >/dev/null 2>&1 & while ! test -s "+pidFile+"; do sleep 0.01; done").CombinedOutput()
	if err != nil {
		t.Fatalf("%v %s", err, out)
	}
	pid := readPid(t, pidFile)
	if alive(t, pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("a command that left its group (setsid) outlived run")
	}
}

// When run is killed, or its lease is lost and the command outlives -grace, what the command
// started in another session dies too.
func TestRunSetsidEscapeKilledOnLossAndWithTheCLI(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	for _, how := range []string{"lost", "SIGKILL"} {
		pidFile := filepath.Join(t.TempDir(), "pid")
		cmd := cli(t.Context(), "run", "-redis", url, "-key", "esc-"+how, "-ttl", "3s", "-grace", "200ms", "--", "sh", "-c",
			"trap '' TERM; setsid sh -c 'echo $$ > "+pidFile+"; exec sleep 300' </dev/null >/dev/null 2>&1 & sleep 300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := readPid(t, pidFile)
		if how == "lost" {
			if _, err := redistest.Do(srv.Addr, "FLUSHALL"); err != nil {
				t.Fatal(err)
			}
		} else {
			cmd.Process.Kill()
		}
		err := cmd.Wait()
		if how == "lost" {
			if code := exitCodeOf(err); code != exitLost {
				t.Errorf("lost: exit %d, want %d", code, exitLost)
			}
			if alive(t, pid) {
				t.Errorf("lost: run exited while the command's setsid child %d was alive", pid)
			}
		}
		poll.Until(t, how+": the setsid child dies", func() bool { return !alive(t, pid) })
	}
}

// Orphans that come to the supervisor (a subreaper) are reaped as they end, not left as
// zombies while the command runs on.
func TestRunSupervisorReapsOrphansWhileTheCommandRuns(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	done := filepath.Join(t.TempDir(), "done")
	cmd := cli(t.Context(), "run", "-redis", "redis://"+srv.Addr, "-key", "orphans", "--", "sh", "-c",
		"for i in 1 2 3 4 5 6 7 8 9 10; do (sleep 0.01 &); done; echo > "+done+"; sleep 300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	readPidOrEmpty := func() bool { _, err := os.Stat(done); return err == nil }
	poll.Until(t, "the orphans are started", readPidOrEmpty)
	var sup int
	poll.Until(t, "the supervisor has no zombie child and only the command left", func() bool {
		kids, zombies := 0, 0
		for _, p := range procs(t) {
			if p.ppid == cmd.Process.Pid {
				sup = p.pid
			}
		}
		for _, p := range procs(t) {
			if sup != 0 && p.ppid == sup {
				kids++
				if p.state == 'Z' {
					zombies++
				}
			}
		}
		return sup != 0 && kids == 1 && zombies == 0
	})
}

// SIGTERM at any moment around the grant: run ends at once, either interrupted (130) with the
// command never started, or with the command ended by the signal (143); the key is free and
// nothing is left. Before the fix, a signal sent to the group as the supervisor started killed it
// before the command started (143, no command), or came before the command existed and was lost
// (the command ran on to its end).
func TestRunSignalAroundTheGrant(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	dir := t.TempDir()
	// Forty moments across the startup under LEASEHOLD_SOAK=1, every fourth of them otherwise,
	// every eighth under -short.
	step := testenv.Pick(4, 1)
	if testing.Short() && !testenv.Soak() {
		step = 8
	}
	for i := 0; i < 40; i += step {
		started := filepath.Join(dir, "started"+strconv.Itoa(i))
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		cmd := cli(ctx, "run", "-redis", url, "-key", "race", "-ttl", "3s", "--", "sh", "-c", "echo $$ > "+started+"; exec sleep 300")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Signal at a moment that moves across the startup from round to round.
		for range i * 2 {
			procs(t)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		timedOut := ctx.Err() != nil
		cancel()
		code := exitCodeOf(err)
		data, _ := os.ReadFile(started)
		switch {
		case timedOut:
			t.Errorf("round %d: run still running 15s after SIGTERM (command started: %v)", i, len(data) > 0)
		case code == exitInterrupted && len(data) == 0:
		case code == 128+int(syscall.SIGTERM):
		case code == -1 && len(data) == 0: // the signal came before run set up its handler
		default:
			t.Errorf("round %d: exit %d (%v), command started: %v, output %q", i, code, err, len(data) > 0, out.String())
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			poll.Until(t, "the command is dead", func() bool { return !alive(t, pid) })
		}
		// A lease granted as the signal cancelled Acquire is released before run exits (see
		// TestRunInterruptedAsTheGrantIsInFlightReleasesIt), unless the Acquire reached the
		// server only after that release, over another connection: then it is held until its
		// TTL (-ttl 3s) runs out, a liveness gap, not an overlap. So: poll, well within 20s.
		poll.Until(t, "the key is free", func() bool {
			code, iout, _ := runArgs(t, t.Context(), "inspect", "-redis", url, "race")
			return code == 0 && strings.HasPrefix(iout, "race: 0 holder(s)")
		})
	}
}

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
)

// proc is a process as /proc/PID/stat shows it.
type proc struct {
	pid, ppid, pgrp int
	state           byte
}

// procs lists the processes in /proc.
func procs(t *testing.T) []proc {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var ps []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // it has ended since
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		ppid, _ := strconv.Atoi(f[1])
		pgrp, _ := strconv.Atoi(f[2])
		ps = append(ps, proc{pid: pid, ppid: ppid, pgrp: pgrp, state: f[0][0]})
	}
	return ps
}

// liveInGroup returns the processes of group pgid that have not ended (zombies have).
func liveInGroup(t *testing.T, pgid int) []proc {
	var live []proc
	for _, p := range procs(t) {
		if p.pgrp == pgid && p.state != 'Z' && p.state != 'X' {
			live = append(live, p)
		}
	}
	return live
}

func TestRunCommandGroupDiesWithKilledCLI(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	cmd := cli(t.Context(), "run", "-redis", "redis://"+srv.Addr, "-key", "k9", "--", "sh", "-c", "sleep 300 & sleep 300; wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	var pgid int
	poll.Until(t, "the command's group has its supervisor, sh and two sleeps", func() bool {
		for _, p := range procs(t) {
			if p.ppid == cmd.Process.Pid {
				pgid = p.pgrp
			}
		}
		return pgid != 0 && len(liveInGroup(t, pgid)) == 4
	})
	if own := syscall.Getpgrp(); pgid == own {
		t.Fatalf("the command runs in the test's own process group %d", own)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	poll.Until(t, "no process of the command's group is left", func() bool { return len(liveInGroup(t, pgid)) == 0 })
}

func TestRunKillsWhatTheCommandLeavesBehind(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	out, err := cli(t.Context(), "run", "-redis", "redis://"+srv.Addr, "-key", "left", "--", "sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $! > "+pidFile).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the sleep the command left running has been killed", func() bool {
		for _, p := range procs(t) {
			if p.pid == pid && p.state != 'Z' && p.state != 'X' {
				return false
			}
		}
		return true
	})
}

func TestRunSignalsReachTheWholeGroup(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	// sh's trap waits for the background sleep: it ends only if SIGTERM reached the sleep too.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := cli(ctx, "run", "-redis", "redis://"+srv.Addr, "-key", "sig", "--", "sh", "-c", "trap 'echo got TERM; wait; exit 0' TERM; sleep 300 & wait")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the command's group has its supervisor, sh and a sleep", func() bool {
		for _, p := range procs(t) {
			if p.ppid == cmd.Process.Pid {
				return len(liveInGroup(t, p.pgrp)) == 3
			}
		}
		return false
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(out.String(), "got TERM") {
		t.Errorf("exit %d, output %q; want 0 and sh's trap having run, its sleep ended by the same SIGTERM", code, out.String())
	}
}

package supervise

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
)

// startWritingPids starts script under a supervisor with its stdout in a file, waits until the
// script has written want pids, one a line, and returns the child and the pids.
func startWritingPids(t *testing.T, stop Stop, want int, script string) (*Child, []int) {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "pids"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	c, err := Start([]string{"sh", "-c", script}, os.Environ(), Stdio{Out: out, Err: os.Stderr}, stop)
	if err != nil {
		t.Fatal(err)
	}
	pids := poll.For(t, "the command has written its pids", func() ([]int, bool) {
		b, _ := os.ReadFile(out.Name())
		var pids []int
		for f := range strings.FieldsSeq(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return nil, false
			}
			pids = append(pids, pid)
		}
		return pids, len(pids) == want
	})
	return c, pids
}

// running reports whether pid is a process that has not ended (a zombie has).
func running(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// leftBehind starts a sleep in the command's group and one in a session of its own (setsid),
// writes their pids, and waits.
const leftBehind = `sleep 300 >/dev/null 2>&1 & echo $!; setsid sleep 300 >/dev/null 2>&1 & echo $!; exec sleep 300 >/dev/null`

func TestWaitReturnsOnceWhatTheCommandLeftIsDead(t *testing.T) {
	t.Parallel()
	c, pids := startWritingPids(t, farOff(), 2, `sleep 300 >/dev/null 2>&1 & echo $!; setsid sleep 300 >/dev/null 2>&1 & echo $!`)
	if got := c.Wait(); got != 0 {
		t.Errorf("Wait() = %d, want the command's 0", got)
	}
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("process %d, which the command left running, outlived Wait", pid)
		}
	}
}

func TestSupervisorKillsEverythingWhenTheCLIsEndCloses(t *testing.T) {
	t.Parallel()
	c, pids := startWritingPids(t, farOff(), 2, leftBehind)
	// As when the CLI dies: the supervisor reads EOF. (Close would wait for the blocked Read.)
	rc, err := c.link.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
	// Wait sends SIGKILL to the group, the supervisor's too, which the CLI's death does not.
	poll.Until(t, "the supervisor has ended", func() bool { return !running(c.sup.Process.Pid) })
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("process %d outlived the CLI's end of the link", pid)
		}
	}
	c.Wait()
}

func TestStoppedSupervisorsCommandIsKilledByTheCLIBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	c, pids := startWritingPids(t, farOff(), 2, leftBehind)
	if err := syscall.Kill(c.sup.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stop := soon(100*time.Millisecond, 300*time.Millisecond)
	c.Schedule(stop)
	if got, want := c.Wait(), 128+int(syscall.SIGKILL); got != want {
		t.Errorf("Wait() = %d, want %d: the supervisor killed by the CLI's backstop", got, want)
	}
	if now := time.Now(); now.After(stop.Deadline) {
		t.Logf("Wait returned %v after the deadline (a loaded machine)", now.Sub(stop.Deadline))
	}
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("process %d outlived its stopped supervisor", pid)
		}
	}
}

func TestCommandThatCannotStartExits127(t *testing.T) {
	t.Parallel()
	errOut, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errOut.Close()
	c, err := Start([]string{"/nonexistent/command"}, os.Environ(), Stdio{Err: errOut}, farOff())
	if err != nil {
		t.Fatalf("Start: %v; want the supervisor started, and the command's failure its status", err)
	}
	got := c.Wait()
	b, _ := os.ReadFile(errOut.Name())
	if got != 127 || !strings.Contains(string(b), "/nonexistent/command") {
		t.Errorf("Wait() = %d, stderr %q; want 127 and the command named", got, b)
	}
}

func TestGroupAndChildrenOfFindsTheGroupButNotItsLeader(t *testing.T) {
	t.Parallel()
	c, pids := startWritingPids(t, farOff(), 2, leftBehind)
	defer c.Wait()
	defer c.Signal(syscall.SIGKILL)
	sup := c.sup.Process.Pid
	got := groupAndChildrenOf(sup, sup)
	if slices.Contains(got, sup) {
		t.Errorf("groupAndChildrenOf(%d, %d) = %v: holds the supervisor itself", sup, sup, got)
	}
	for _, pid := range pids[:1] { // the setsid sleep is in neither: not its child, not its group
		if !slices.Contains(got, pid) {
			t.Errorf("groupAndChildrenOf(%d, %d) = %v: no %d, in the supervisor's group", sup, sup, got, pid)
		}
	}
}

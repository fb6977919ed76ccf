//go:build linux

package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/leasehold/leasehold/internal/testenv"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/internal/poll"
)

// A `leasehold run` stopped with SIGSTOP (not its command) refreshes its lease no more: its
// supervisor's dead-man's switch kills the command on the lease's schedule, so every process of
// the first command is dead before a second run waiting on the key starts its own. The command
// ignores SIGTERM, so only the SIGKILL before the deadline ends it. The test logs the gap between
// the first command's death (as this test saw it, so at most the real gap) and the second's start.
// With -lock-delay, which the store enforces, the gap is the lock delay more.
func TestRunStoppedRunsCommandDiesBeforeTheNextStarts(t *testing.T) {
	testenv.SkipShort(t, "stops a run with SIGSTOP past its TTL")
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.StartServer(t)
		stoppedRunsCommandDiesFirst(t, "redis://"+srv.Addr, "frozen", 0, func() { waitForWaiters(t, srv.Addr, 1) })
	})
	t.Run("redis-lock-delay", func(t *testing.T) {
		t.Parallel()
		srv := redistest.StartServer(t)
		stoppedRunsCommandDiesFirst(t, "redis://"+srv.Addr, "frozen", 2*time.Second, func() { waitForWaiters(t, srv.Addr, 1) })
	})
	t.Run("postgres-lock-delay", func(t *testing.T) {
		t.Parallel()
		url, key := pgServer(t).URL, unique("frozen")
		stoppedRunsCommandDiesFirst(t, url, key, 2*time.Second, func() { waitInspect(t, url, key, "1", "1 waiting") })
	})
}

// stoppedRunsCommandDiesFirst runs the scene of TestRunStoppedRunsCommandDiesBeforeTheNextStarts
// on key of the store at url, both runs with -lock-delay lockDelay; waiting returns once the
// second run waits for the key.
func stoppedRunsCommandDiesFirst(t *testing.T, url, key string, lockDelay time.Duration, waiting func()) {
	dir := t.TempDir()
	ready, started2 := filepath.Join(dir, "ready"), filepath.Join(dir, "started2")

	// -ttl 5s: the SIGKILL comes at the stop margin (500ms) before the deadline, the store's
	// expiry later still, which leaves the supervisor half a second of scheduling delay.
	flags := append(storeFlag(url), "-key", key, "-ttl", "5s", "-lock-delay", lockDelay.String())
	first := cli(t.Context(), append(append([]string{"run"}, flags...), "--", "sh", "-c",
		"trap '' TERM; sleep 300 & sleep 300 & echo > "+ready+"; wait")...)
	var out1 strings.Builder
	first.Stdout, first.Stderr = &out1, &out1
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Wait()
	defer first.Process.Kill()
	defer first.Process.Signal(syscall.SIGCONT)
	poll.Until(t, "the first command has started its sleeps", func() bool { _, err := os.Stat(ready); return err == nil })
	var sup, pgid int
	for _, p := range procs(t) {
		if p.ppid == first.Process.Pid {
			sup, pgid = p.pid, p.pgrp
		}
	}
	var pids []int // the first command's processes: sh and its two sleeps
	for _, p := range liveInGroup(t, pgid) {
		if p.pid != sup {
			pids = append(pids, p.pid)
		}
	}
	if sup == 0 || len(pids) != 3 {
		t.Fatalf("supervisor %d, the command's processes %v: want a supervisor, sh and two sleeps", sup, pids)
	}
	defer func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}()

	second := cli(t.Context(), append(append([]string{"run"}, flags...), "-wait", "60s", "--", "sh", "-c",
		"date +%s%N > "+started2+".tmp && mv "+started2+".tmp "+started2)...)
	var out2 strings.Builder
	second.Stdout, second.Stderr = &out2, &out2
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	defer second.Wait()
	waiting()
	if err := first.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	// When the first command's last process died, to the microsecond: pidfds are readable once
	// their process has ended.
	died := make(chan time.Time, len(pids))
	for _, pid := range pids {
		go func() { died <- exitTime(pid) }()
	}
	var dead time.Time
	deadline := time.After(60 * time.Second)
	for range pids {
		select {
		case d := <-died:
			if d.After(dead) {
				dead = d
			}
		case <-deadline:
			t.Fatalf("the stopped run's command %v was still alive 60s later; the second run: %q", pids, out2.String())
		}
	}
	data := poll.For(t, "the second run's command to start", func() ([]byte, bool) {
		data, err := os.ReadFile(started2)
		return data, err == nil
	})
	ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	start2 := time.Unix(0, ns)
	switch gap := start2.Sub(dead); {
	case gap <= 0:
		t.Errorf("the second run's command started %v before the first's last process died: overlap", -gap)
	case gap < lockDelay:
		t.Errorf("the second run's command started %v after the first's last process died: within -lock-delay %v", gap, lockDelay)
	default:
		t.Logf("%s: overlap 0: the second command started %v after the first's last process died (-lock-delay %v)", t.Name(), gap, lockDelay)
	}
	if err := second.Wait(); err != nil {
		t.Errorf("second run: %v\n%s", err, out2.String())
	}

	// Once it runs again, the first run finds its command stopped and exits 75.
	if err := first.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	if code := first.ProcessState.ExitCode(); code != exitLost {
		t.Errorf("the first run, continued: exit %d, want %d; output %q", code, exitLost, out1.String())
	}
}

// When the supervisor is the one stopped and the lease cannot be renewed (the network to the
// store held), run itself sends SIGKILL to the command's group, halfway from the kill time to the
// deadline: the command dies while the store still holds the lease, and run exits 75.
func TestRunStoppedSupervisorsCommandIsKilledBeforeTheLeaseExpires(t *testing.T) {
	testenv.SkipShort(t, "stops a supervisor with SIGSTOP past its TTL")
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	ready := filepath.Join(t.TempDir(), "ready")
	cmd, out := startRun(t, "run", "-redis", "redis://"+proxy.Addr, "-key", "supstop", "-ttl", "6s", "--", "sh", "-c",
		"trap '' TERM; sleep 300 & echo > "+ready+"; wait")
	poll.Until(t, "the command has started its sleep", func() bool { _, err := os.Stat(ready); return err == nil })
	var sup, pgid int
	for _, p := range procs(t) {
		if p.ppid == cmd.Process.Pid {
			sup, pgid = p.pid, p.pgrp
		}
	}
	var pids []int
	for _, p := range liveInGroup(t, pgid) {
		if p.pid != sup {
			pids = append(pids, p.pid)
		}
	}
	if sup == 0 || len(pids) != 2 {
		t.Fatalf("supervisor %d, the command's processes %v: want a supervisor, sh and a sleep", sup, pids)
	}
	defer func() {
		for _, pid := range append(pids, sup) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	if err := syscall.Kill(sup, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	proxy.Hold(true) // no refresh reaches the store any more

	died := make(chan struct{}, len(pids))
	for _, pid := range pids {
		go func() { exitTime(pid); died <- struct{}{} }()
	}
	for range pids {
		select {
		case <-died:
		case <-time.After(60 * time.Second):
			t.Fatalf("the command %v still alive 60s after its supervisor was stopped; run said %q", pids, out.String())
		}
	}
	// The lease's TTL is 6s: the kill came 300ms before its local deadline, and the server, asked
	// directly, still holds it.
	code, iout, _ := runArgs(t, t.Context(), "inspect", "-redis", srv.Addr, "supstop")
	if code != 0 || !strings.HasPrefix(iout, "supstop: 1 holder(s)") {
		t.Errorf("when the command had died, the server showed %q; want the lease still held", iout)
	}
	proxy.Hold(false)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitLost {
		t.Errorf("run exited %d, want %d; output %q", code, exitLost, out.String())
	}
}

// exitTime waits for process pid to end and returns when it did (the time of the call if it has
// ended and been reaped already).
func exitTime(pid int) time.Time {
	const sysPidfdOpen = 434 // the same on every architecture
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno != 0 {
		return time.Now() // ESRCH: gone
	}
	defer syscall.Close(int(fd))
	pfd := struct {
		fd              int32
		events, revents int16
	}{fd: int32(fd), events: 1} // POLLIN
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, 0, 0, 0, 0)
		if errno != syscall.EINTR {
			return time.Now()
		}
	}
}

// When the supervisor is the one stopped and the lease cannot be renewed, what the command started
// in another session (setsid) dies too: run kills the supervisor's group and descendants before the
// supervisor, so that nothing is orphaned out of its reach.
func TestRunStoppedSupervisorsSetsidChildIsKilledToo(t *testing.T) {
	testenv.SkipShort(t, "stops a supervisor with SIGSTOP past its TTL")
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd, out := startRun(t, "run", "-redis", "redis://"+proxy.Addr, "-key", "supstop-setsid", "-ttl", "3s", "--", "sh", "-c",
		"trap '' TERM; setsid sh -c 'echo $$ > "+pidFile+"; exec sleep 300' </dev/null >/dev/null 2>&1 & sleep 300")
	escaped := readPid(t, pidFile)
	defer syscall.Kill(escaped, syscall.SIGKILL)
	var sup int
	poll.Until(t, "the supervisor", func() bool {
		for _, p := range procs(t) {
			if p.ppid == cmd.Process.Pid {
				sup = p.pid
			}
		}
		return sup != 0
	})
	defer syscall.Kill(sup, syscall.SIGKILL)
	if err := syscall.Kill(sup, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	proxy.Hold(true) // no refresh reaches the store any more
	done := make(chan struct{})
	go func() { exitTime(escaped); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the command's setsid child %d still alive 60s after its supervisor was stopped; run said %q", escaped, out.String())
	}
	proxy.Hold(false)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitLost {
		t.Errorf("run exited %d, want %d; output %q", code, exitLost, out.String())
	}
}

// A supervisor stopped (SIGSTOP) and continued while run renews the lease does not stop the
// command: the stop times run sent meanwhile wait in its socket, and the supervisor applies them
// before it acts on its timer, set for times run has since moved on (both are ready at once when
// it continues). The stops are the fault, longer than the time to SIGTERM of the lease's first
// schedule; a SIGTERM after one shows at the next.
func TestRunSupervisorStoppedWhileTheLeaseIsRenewedLeavesTheCommandRunning(t *testing.T) {
	testenv.SkipShort(t, "stops a supervisor with SIGSTOP four times")
	t.Parallel()
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	ready, term := filepath.Join(dir, "ready"), filepath.Join(dir, "term")
	cmd, out := startRun(t, "run", "-redis", "redis://"+srv.Addr, "-key", "paused", "-ttl", "2s", "--", "sh", "-c",
		"trap 'echo > "+term+"; exit 0' TERM; echo > "+ready+"; while :; do sleep 0.05; done")
	poll.Until(t, "the command has started", func() bool { _, err := os.Stat(ready); return err == nil })
	var sup int
	for _, p := range procs(t) {
		if p.ppid == cmd.Process.Pid {
			sup = p.pid
		}
	}
	if sup == 0 {
		t.Fatal("no supervisor")
	}
	defer syscall.Kill(sup, syscall.SIGCONT)
	// Past the SIGTERM time of a 2s lease not renewed. (A shorter -ttl leaves a loaded machine
	// too little time to start the supervisor, a race-detector binary, before that time.)
	const stop = 2200 * time.Millisecond
	for i := range 4 {
		if err := syscall.Kill(sup, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(stop)
		syscall.Kill(sup, syscall.SIGCONT)
		time.Sleep(stop / 4)
		if _, err := os.Stat(term); err == nil {
			t.Fatalf("after stop %d: the command got SIGTERM though run renewed its lease all along; run said %q", i+1, out.String())
		}
	}
}

// startRun starts the leasehold binary with args, its output gathered in the returned builder
// (read it once the process has exited), and kills and reaps it when the test ends.
func startRun(t *testing.T, args ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := cli(t.Context(), args...)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, out
}

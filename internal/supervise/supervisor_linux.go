package supervise

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// supervisorEnv, set to "1", makes this binary the supervisor of a command (see Start) instead
// of the program it is.
const supervisorEnv = "LEASEHOLD_RUN_SUPERVISOR"

// stopEnv carries the first stop times to the supervisor, so that its switch is armed before the
// command starts.
const stopEnv = "LEASEHOLD_RUN_STOP"

func init() {
	if os.Getenv(supervisorEnv) == "1" {
		os.Exit(runSupervisor(os.Args[1:]))
	}
}

// runSupervisor runs command (argv) in this process's group, which Start made for it, and
// returns its exit status (128+N if signal N ended it; 127 if it could not be started).
//
// The supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER): whatever the command starts and
// leaves behind, even in another process group or session (setsid, a nested `leasehold run`),
// stays its descendant. It reaps them as they end, and it returns only once the command has
// ended and every descendant has been killed and reaped: the CLI releases the lease only after
// that. When the CLI at fd 3 ends, it kills its group and every descendant the same way, then
// exits. So it does at the kill time of its dead-man's switch (deadman), SIGTERM to the group
// coming first, at the stop times the CLI last gave it: in stopEnv at the start, then over fd 3.
func runSupervisor(command []string) int {
	link, term, kill, err := takeOver(command)
	if err != nil {
		fmt.Fprintf(os.Stderr, "leasehold run: supervisor: %v\n", err)
		return statusFail
	}
	f := &family{ended: make(chan struct{}), reaped: make(chan struct{}, 1), allReaped: make(chan struct{})}
	if err := f.start(command); err != nil {
		fmt.Fprintf(os.Stderr, "leasehold run: %v\n", err)
		return 127
	}
	dm, err := newDeadman(link, term, kill)
	if err != nil {
		fmt.Fprintf(os.Stderr, "leasehold run: supervisor: %v\n", err)
		syscall.Kill(f.cmd.Process.Pid, syscall.SIGKILL)
		return statusFail
	}
	go f.reap()
	link.Write([]byte{1}) // the command has started: see Start
	select {
	case <-f.ended:
	case <-dm.cliEnded:
	case <-dm.killed: // the lease was not renewed in time
	}
	f.killAll()
	select {
	case <-f.ended:
	default:
		return statusFail // the CLI ended first: nobody reads this status
	}
	if f.status.Signaled() {
		return 128 + int(f.status.Signal())
	}
	return f.status.ExitStatus()
}

// takeOver makes this process the supervisor of command: it takes the CLI's end of the link
// (fd 3) and the first stop times (stopEnv), outlives the signals sent to its group, and becomes
// a child subreaper. It returns an error saying what failed.
func takeOver(command []string) (link *os.File, term, kill int64, err error) {
	link = os.NewFile(3, "leasehold-link")
	syscall.CloseOnExec(3)
	os.Unsetenv(supervisorEnv)
	_, err = fmt.Sscanf(os.Getenv(stopEnv), "%d,%d", &term, &kill)
	os.Unsetenv(stopEnv)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%s: %w", stopEnv, err)
	}
	// Signals sent to the group are the command's; the supervisor must live on to report how the
	// command ends. Notify, not Ignore: an ignored signal would stay ignored in the command.
	signal.Notify(make(chan os.Signal, 1), Forwarded...)
	if len(command) == 0 {
		return nil, 0, 0, errors.New("no command")
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return nil, 0, 0, fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", errno)
	}
	return link, term, kill, nil
}

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// family is the command and what it leaves to the supervisor, a subreaper, as one reaper sees
// them end.
type family struct {
	cmd       *exec.Cmd
	status    syscall.WaitStatus // how the command ended, once ended is closed
	ended     chan struct{}      // closed once the command has been reaped
	reaped    chan struct{}      // told, without blocking, that a child has been reaped
	allReaped chan struct{}      // closed when no child is left (ECHILD)
}

// start starts command with the supervisor's stdio and the parent-death signal (SIGKILL), or
// returns why it could not.
func (f *family) start(command []string) error {
	f.cmd = exec.Command(command[0], command[1:]...)
	f.cmd.Stdin, f.cmd.Stdout, f.cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that forked ends, not the process: this
		// goroutine keeps its thread until the command has been reaped.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := f.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		<-f.ended
	}()
	return <-started
}

// reap reaps every child as it ends, the command and the orphans that come to this subreaper,
// until none is left. The command's status goes to f.status.
func (f *family) reap() {
	defer close(f.allReaped)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return // ECHILD: none left
		}
		if pid == f.cmd.Process.Pid {
			f.status = ws
			close(f.ended)
		}
		select {
		case f.reaped <- struct{}{}:
		default:
		}
	}
}

// killAll kills the supervisor's group and every descendant, again as orphans come, until none
// is left.
func (f *family) killAll() {
	for {
		for _, pid := range groupAndChildren() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-f.allReaped:
			return
		case <-f.reaped:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// groupAndChildren returns the other processes of this process's group and its children.
func groupAndChildren() []int { return groupAndChildrenOf(os.Getpid(), syscall.Getpgrp()) }

// groupAndChildrenOf returns the processes of group pgrp and the children of self, but self, and
// those that have ended (zombies, which SIGKILL cannot end).
func groupAndChildrenOf(self, pgrp int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // it has ended since
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 3 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pg, _ := strconv.Atoi(f[2])
		if f[0] == "Z" || f[0] == "X" {
			continue
		}
		if ppid == self || pg == pgrp {
			pids = append(pids, pid)
		}
	}
	return pids
}

//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// forwarded are the signals `leasehold run` passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// supervisorEnv, set to "1", makes this binary the supervisor of a command (see startChild)
// instead of the CLI.
const supervisorEnv = "LEASEHOLD_RUN_SUPERVISOR"

func init() {
	if os.Getenv(supervisorEnv) == "1" {
		os.Exit(supervise(os.Args[1:]))
	}
}

// child is a command started by `leasehold run`, in a process group of its own under a
// supervisor: this binary re-executed, which leads the group and starts the command in it.
//
// The CLI and the supervisor share a socket pair, so each sees the other end, however it ends:
//   - When the CLI dies, even by SIGKILL, the supervisor reads EOF and sends SIGKILL to the rest of
//     its group and to every descendant, then exits (see supervise). After -grace, the CLI
//     shuts its end down for the same effect (see kill).
//     SIGKILL rather than SIGTERM: nobody refreshes the lease any more and its time left is
//     unknown, so the command must not run on through a grace period.
//   - When the supervisor ends (the command exited, or the supervisor was killed), the CLI reads
//     EOF and sends SIGKILL to what is left in the group before it reaps the supervisor: until
//     then the group's id, the supervisor's pid, cannot be reused.
//
// The command also has the parent-death signal (SIGKILL) towards the supervisor, so it dies if the
// supervisor alone is killed. The supervisor is a child subreaper: what leaves the group (setsid,
// setpgid, a nested `leasehold run`) stays its descendant and is killed with the rest; only if the
// supervisor itself is killed with SIGKILL does it escape.
type child struct {
	sup   *exec.Cmd
	link  *os.File      // the CLI's end of the socket pair
	ended chan struct{} // closed when the supervisor has ended (not yet reaped)
}

// startChild starts command with env, in a process group of its own under a supervisor.
// A command that cannot be started is reported by the supervisor, which exits 127.
func startChild(command, env []string, std stdio) (*child, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	link, theirs := os.NewFile(uintptr(fds[0]), "leasehold-link"), os.NewFile(uintptr(fds[1]), "leasehold-link")
	defer theirs.Close()
	sup := &exec.Cmd{
		Path:        "/proc/self/exe", // this binary, even if it has been replaced on disk since
		Args:        append([]string{"leasehold-run-supervisor"}, command...),
		Env:         append(env, supervisorEnv+"=1"),
		Stdin:       std.in,
		Stdout:      std.out,
		Stderr:      std.err,
		ExtraFiles:  []*os.File{theirs}, // fd 3
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := sup.Start(); err != nil {
		link.Close()
		return nil, err
	}
	// The supervisor writes one byte once the command has started; until then a signal sent to
	// the group could kill the supervisor before it handles signals, or miss the command. EOF
	// instead: the command could not start (the supervisor has reported it) or the supervisor
	// was killed; wait reports either.
	theirs.Close() // now the supervisor's alone: its end reads EOF when it ends
	link.Read(make([]byte, 1))
	c := &child{sup: sup, link: link, ended: make(chan struct{})}
	go func() {
		defer close(c.ended)
		io.Copy(io.Discard, link) // the supervisor writes nothing more: this returns when it ends
	}()
	return c, nil
}

// signal sends sig to the command's whole process group.
func (c *child) signal(sig syscall.Signal) {
	syscall.Kill(-c.sup.Process.Pid, sig)
}

// kill ends the command and everything it started, as when the CLI dies: the supervisor, told
// by the socket pair, kills its group and every descendant, even those that left the group, and
// exits once they are reaped. A supervisor that does not (stopped, say) gets SIGKILL with its
// group after killWait.
func (c *child) kill() {
	if rc, err := c.link.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_WR) })
	}
	go func() {
		select {
		case <-c.ended:
		case <-time.After(killWait):
			c.signal(syscall.SIGKILL)
		}
	}()
}

// killWait is how long kill gives the supervisor to clean up before SIGKILL.
const killWait = 5 * time.Second

// done is closed when the command has ended.
func (c *child) done() <-chan struct{} { return c.ended }

// wait, once done is closed, kills what the command left running in its group and returns how
// the command ended, as its supervisor reports it.
func (c *child) wait() error {
	<-c.ended
	c.signal(syscall.SIGKILL)
	err := c.sup.Wait()
	c.link.Close()
	return err
}

// supervise runs command (argv) in this process's group, which startChild made for it, and
// returns its exit status (128+N if signal N ended it; 127 if it could not be started).
//
// The supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER): whatever the command starts and
// leaves behind, even in another process group or session (setsid, a nested `leasehold run`),
// stays its descendant. It reaps them as they end, and it returns only once the command has
// ended and every descendant has been killed and reaped: the CLI releases the lease only after
// that. When the CLI at fd 3 ends, it kills its group and every descendant the same way, then
// exits.
func supervise(command []string) int {
	link := os.NewFile(3, "leasehold-link")
	syscall.CloseOnExec(3)
	os.Unsetenv(supervisorEnv)
	// Signals sent to the group are the command's; the supervisor must live on to report how the
	// command ends. Notify, not Ignore: an ignored signal would stay ignored in the command.
	signal.Notify(make(chan os.Signal, 1), forwarded...)
	if len(command) == 0 {
		fmt.Fprintln(os.Stderr, "leasehold run: supervisor: no command")
		return exitFail
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		fmt.Fprintf(os.Stderr, "leasehold run: supervisor: PR_SET_CHILD_SUBREAPER: %v\n", errno)
		return exitFail
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	commandEnded := make(chan struct{}) // closed once the command has been reaped
	go func() {
		// The parent-death signal fires when the thread that forked ends, not the process: this
		// goroutine keeps its thread until the command has been reaped.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		<-commandEnded
	}()
	if err := <-started; err != nil {
		fmt.Fprintf(os.Stderr, "leasehold run: %v\n", err)
		return 127
	}

	// One reaper for every child: the command, and the orphans that come to this subreaper.
	var status syscall.WaitStatus
	reaped := make(chan struct{}, 1) // a child has been reaped
	allReaped := make(chan struct{}) // closed when no child is left (ECHILD)
	go func() {
		defer close(allReaped)
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				return // ECHILD: none left
			}
			if pid == cmd.Process.Pid {
				status = ws
				close(commandEnded)
			}
			select {
			case reaped <- struct{}{}:
			default:
			}
		}
	}()
	cliEnded := make(chan struct{})
	link.Write([]byte{1}) // the command has started: see startChild
	go func() {
		io.Copy(io.Discard, link)
		close(cliEnded)
	}()
	select {
	case <-commandEnded:
	case <-cliEnded:
	}
	// Kill the group and every descendant, again as orphans come, until none is left.
	for done := false; !done; {
		for _, pid := range groupAndChildren() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-allReaped:
			done = true
		case <-reaped:
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case <-commandEnded:
	default:
		return exitFail // the CLI ended first: nobody reads this status
	}
	if status.Signaled() {
		return 128 + int(status.Signal())
	}
	return status.ExitStatus()
}

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// groupAndChildren returns the other processes of this process's group and its children.
func groupAndChildren() []int {
	self, pgrp := os.Getpid(), syscall.Getpgrp()
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
		if ppid == self || pg == pgrp {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processGroupNote is what --help says of the command's process group on this system.
const processGroupNote = `The command runs in a process group of its own, under a small supervisor: signals, and the
stop when the lease is lost, go to the whole group; when the command exits, what it left running
in the group is killed (SIGKILL) before the lease is released; and if leasehold itself dies, even
by SIGKILL, the supervisor kills the group at once. The supervisor is a child subreaper: what
leaves the group (setsid, daemons, a nested leasehold run) is killed and reaped too, before the
lease is released; it escapes only if the supervisor itself is killed with SIGKILL. Being a background group, the command stops (SIGTTIN) if it reads from
a terminal, as under timeout(1): give it another stdin.`

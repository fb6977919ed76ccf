//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
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
//   - When the CLI dies, even by SIGKILL, the supervisor reads EOF and sends SIGKILL to the whole
//     group, itself included: the command and everything it started in the group, at once.
//     SIGKILL rather than SIGTERM: nobody refreshes the lease any more and its time left is
//     unknown, so the command must not run on through a grace period.
//   - When the supervisor ends (the command exited, or the supervisor was killed), the CLI reads
//     EOF and sends SIGKILL to what is left in the group before it reaps the supervisor: until
//     then the group's id, the supervisor's pid, cannot be reused.
//
// The command also has the parent-death signal (SIGKILL) towards the supervisor, so it dies if the
// supervisor alone is killed. A command that leaves its process group (setsid, setpgid) escapes
// all of this.
type child struct {
	sup   *exec.Cmd
	link  *os.File      // the CLI's end of the socket pair
	ended chan struct{} // closed when the supervisor has ended (not yet reaped)
}

// startChild starts command with env, in a process group of its own under a supervisor.
// A command that cannot be started is reported by the supervisor, which exits 127.
func startChild(command, env []string, stdin io.Reader, stdout, stderr io.Writer) (*child, error) {
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
		Stdin:       stdin,
		Stdout:      stdout,
		Stderr:      stderr,
		ExtraFiles:  []*os.File{theirs}, // fd 3
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := sup.Start(); err != nil {
		link.Close()
		return nil, err
	}
	c := &child{sup: sup, link: link, ended: make(chan struct{})}
	go func() {
		defer close(c.ended)
		io.Copy(io.Discard, link) // the supervisor writes nothing: this returns when it ends
	}()
	return c, nil
}

// signal sends sig to the command's whole process group.
func (c *child) signal(sig syscall.Signal) {
	syscall.Kill(-c.sup.Process.Pid, sig)
}

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
// returns its exit status (128+N if signal N ended it; 127 if it could not be started). It
// returns only if the command ends first: when the CLI at fd 3 ends, it kills the group.
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
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started, exited := make(chan error, 1), make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that forked ends, not the process: this
		// goroutine keeps its thread until the command has been waited for.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		fmt.Fprintf(os.Stderr, "leasehold run: %v\n", err)
		return 127
	}
	go func() {
		io.Copy(io.Discard, link)
		syscall.Kill(0, syscall.SIGKILL) // 0: this process's group
	}()
	return exitStatus(<-exited)
}

// processGroupNote is what --help says of the command's process group on this system.
const processGroupNote = `The command runs in a process group of its own, under a small supervisor: signals, and the
stop when the lease is lost, go to the whole group; when the command exits, what it left running
in the group is killed (SIGKILL) before the lease is released; and if leasehold itself dies, even
by SIGKILL, the supervisor kills the group at once. Processes that leave the group (setsid,
daemons) are not covered. Being a background group, the command stops (SIGTTIN) if it reads from
a terminal, as under timeout(1): give it another stdin.`

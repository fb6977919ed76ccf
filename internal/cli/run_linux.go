//go:build linux

package cli

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
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
//   - The supervisor holds a dead-man's switch (see deadman): it is told when to stop the command
//     (stopAt: SIGTERM, then SIGKILL before the lease's deadline) at its start and after every
//     refresh, and stops it on that schedule by its own clock unless told a later one in time,
//     whatever state the CLI is in: stopped (SIGSTOP), stalled, or dead.
//   - When the CLI dies, even by SIGKILL, the supervisor reads EOF and sends SIGKILL to the rest of
//     its group and to every descendant, then exits (see supervise).
//     SIGKILL rather than SIGTERM: nobody refreshes the lease any more and its time left is
//     unknown, so the command must not run on through a grace period.
//   - When the supervisor ends (the command exited, or the supervisor was killed), the CLI reads
//     EOF and sends SIGKILL to what is left in the group before it reaps the supervisor: until
//     then the group's id, the supervisor's pid, cannot be reused.
//   - The supervisor tells the CLI when it has sent SIGTERM or SIGKILL on schedule (one byte
//     each); if it has not sent SIGKILL halfway from the kill time to the lease's deadline (it is
//     stopped itself, say), the CLI sends SIGKILL to the group and the supervisor's
//     descendants, and to the supervisor last (see killAll).
//
// The command also has the parent-death signal (SIGKILL) towards the supervisor, so it dies if the
// supervisor alone is killed. The supervisor is a child subreaper: what leaves the group (setsid,
// setpgid, a nested `leasehold run`) stays its descendant and is killed with the rest; only if the
// supervisor itself is killed with SIGKILL does it escape.
type child struct {
	sup      *exec.Cmd
	link     *os.File            // the CLI's end of the socket pair
	ended    chan struct{}       // closed when the supervisor has ended (not yet reaped)
	stopped  chan syscall.Signal // the signals the supervisor sent on schedule
	killed   atomic.Bool         // the supervisor reported SIGKILL sent
	backstop *time.Timer         // SIGKILL from the CLI if the supervisor has not sent it
}

// stopEnv carries the first stopAt to the supervisor, so that its switch is armed before the
// command starts.
const stopEnv = "LEASEHOLD_RUN_STOP"

// startChild starts command with env, in a process group of its own under a supervisor that
// stops it at stop unless told a later time (schedule). A command that cannot be started is
// reported by the supervisor, which exits 127.
func startChild(command, env []string, std stdio, stop stopAt) (*child, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	link, theirs := os.NewFile(uintptr(fds[0]), "leasehold-link"), os.NewFile(uintptr(fds[1]), "leasehold-link")
	defer theirs.Close()
	term, kill := bootTimes(stop)
	sup := &exec.Cmd{
		Path:        "/proc/self/exe", // this binary, even if it has been replaced on disk since
		Args:        append([]string{"leasehold-run-supervisor"}, command...),
		Env:         append(env, supervisorEnv+"=1", fmt.Sprintf("%s=%d,%d", stopEnv, term, kill)),
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
	c := &child{sup: sup, link: link, ended: make(chan struct{}), stopped: make(chan syscall.Signal, 4)}
	go func() {
		defer close(c.ended)
		b := make([]byte, 1)
		for {
			if _, err := link.Read(b); err != nil {
				return // the supervisor has ended
			}
			sig := syscall.SIGTERM
			if b[0] == 'K' {
				sig = syscall.SIGKILL
				c.killed.Store(true)
			}
			select {
			case c.stopped <- sig:
			default:
			}
		}
	}()
	c.backstop = time.AfterFunc(time.Until(stop.backstop()), c.killUnlessKilled)
	return c, nil
}

// backstop is when the CLI sends SIGKILL to the command's group if its supervisor has not:
// halfway from the kill time to the lease's deadline.
func (s stopAt) backstop() time.Time { return s.kill.Add(s.deadline.Sub(s.kill) / 2) }

// killUnlessKilled kills the command's group and every descendant of the supervisor, and then
// the supervisor, unless the supervisor has sent SIGKILL or has ended.
func (c *child) killUnlessKilled() {
	select {
	case <-c.ended:
		return
	default:
	}
	if !c.killed.Load() {
		c.killAll()
	}
}

// killAll sends SIGKILL to what the supervisor would kill — its group and its children, again as
// orphans come to it (a subreaper, even while stopped) — until none is left alive, and then to
// the supervisor with its group. The supervisor goes last: killed first, what left the group
// (setsid) would no longer be its descendant, and would escape both.
func (c *child) killAll() {
	sup := c.sup.Process.Pid
	for range 200 { // 2s at most: then the supervisor goes all the same
		pids := groupAndChildrenOf(sup, sup)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.signal(syscall.SIGKILL)
}

// bootTimes returns stop's SIGTERM and SIGKILL times on the CLOCK_BOOTTIME clock, in
// nanoseconds, the clock the supervisor keeps them by.
func bootTimes(stop stopAt) (term, kill int64) {
	now, boot := time.Now(), bootNow()
	return boot + int64(stop.term.Sub(now)), boot + int64(stop.kill.Sub(now))
}

// schedule tells the supervisor a new stop: a later one after a refresh, or an earlier one.
// Once it has sent SIGTERM, the supervisor takes an earlier kill time only.
func (c *child) schedule(stop stopAt) {
	term, kill := bootTimes(stop)
	var msg [16]byte
	binary.BigEndian.PutUint64(msg[:8], uint64(term))
	binary.BigEndian.PutUint64(msg[8:], uint64(kill))
	// Without blocking: a supervisor stopped long enough to fill the socket's buffer (thousands
	// of refreshes) misses the newer times, and stops the command early when it runs again. An
	// error otherwise means the supervisor has ended, which done reports. (16 bytes on a Unix
	// stream socket go as one buffer, whole or not at all.)
	if rc, err := c.link.SyscallConn(); err == nil {
		rc.Write(func(fd uintptr) bool {
			syscall.Sendto(int(fd), msg[:], syscall.MSG_DONTWAIT, nil)
			return true
		})
	}
	c.backstop.Reset(time.Until(stop.backstop()))
}

// stops reports the signals the supervisor sent on schedule: SIGTERM, then SIGKILL.
func (c *child) stops() <-chan syscall.Signal { return c.stopped }

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
	c.backstop.Stop()
	c.signal(syscall.SIGKILL)
	err := c.sup.Wait()
	c.link.Close()
	return err
}

// bootNow reads CLOCK_BOOTTIME, in nanoseconds: monotonic, and counting time suspended, as the
// store's clock does.
func bootNow() int64 {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockBoottime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("clock_gettime(CLOCK_BOOTTIME): " + errno.Error())
	}
	return ts.Nano()
}

const (
	clockBoottime   = 7        // CLOCK_BOOTTIME
	tfdTimerAbstime = 1        // TFD_TIMER_ABSTIME
	tfdCloexec      = 02000000 // TFD_CLOEXEC
	tfdNonblock     = 04000    // TFD_NONBLOCK
)

// deadman is the supervisor's dead-man's switch: SIGTERM to its group at term, SIGKILL to the
// group and every descendant at kill, by CLOCK_BOOTTIME, unless the CLI has told it later times
// by then. A timerfd on that clock wakes it: it needs nothing from the CLI, and it fires on time
// after a suspend, which Go's timers (CLOCK_MONOTONIC) would not.
type deadman struct {
	link     *os.File      // to tell the CLI what was sent: 'T' for SIGTERM, 'K' for SIGKILL
	killed   chan struct{} // closed at the kill time: supervise kills everything
	cliEnded chan struct{} // closed when the CLI's end of link has closed
	tfd      int

	mu         sync.Mutex
	term, kill int64
	termed     bool
}

// newDeadman arms the switch for term and kill and returns it.
func newDeadman(link *os.File, term, kill int64) (*deadman, error) {
	fd, _, errno := syscall.RawSyscall(syscall.SYS_TIMERFD_CREATE, clockBoottime, tfdCloexec|tfdNonblock, 0)
	if errno != 0 {
		return nil, fmt.Errorf("timerfd_create(CLOCK_BOOTTIME): %w", errno)
	}
	d := &deadman{link: link, killed: make(chan struct{}), cliEnded: make(chan struct{}), tfd: int(fd), term: term, kill: kill}
	d.mu.Lock()
	err := d.armLocked()
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	go d.run()
	return d, nil
}

// armLocked sets the timer to the next time the switch acts. d.mu must be held.
func (d *deadman) armLocked() error {
	at := d.term
	if d.termed {
		at = d.kill
	}
	at = max(at, 1) // 0 would disarm it
	its := struct{ interval, value syscall.Timespec }{value: syscall.NsecToTimespec(at)}
	if _, _, errno := syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, uintptr(d.tfd), tfdTimerAbstime, uintptr(unsafe.Pointer(&its)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("timerfd_settime: %w", errno)
	}
	return nil
}

// update takes new times from the CLI: any, until SIGTERM has been sent; after that, an earlier
// kill time only (the stop, once begun, runs to its end).
func (d *deadman) update(term, kill int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.termed {
		kill = min(kill, d.kill)
	} else {
		d.term = term
	}
	d.kill = kill
	d.armLocked()
}

// run waits, in one poll, on the timer and on the CLI's new stop times over link, and applies
// the times before it acts on the timer: after the supervisor was stopped (SIGSTOP) while the CLI
// renewed the lease, both are ready at once, and the timer, set for a time the CLI has since
// moved on, must not stop the command. It closes cliEnded when the CLI's end closes.
func (d *deadman) run() {
	lfd := int(d.link.Fd())
	fds := [2]struct {
		fd              int32
		events, revents int16
	}{{fd: int32(d.tfd), events: 1}, {fd: int32(lfd), events: 1}} // POLLIN
	var pending []byte // a message read in part
	in := make([]byte, 4096)
	for {
		fds[0].revents, fds[1].revents = 0, 0
		if _, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 2, 0, 0, 0, 0); errno != 0 {
			if errno == syscall.EINTR {
				continue
			}
			return
		}
		if fds[1].revents != 0 {
			for {
				n, _, err := syscall.Recvfrom(lfd, in, syscall.MSG_DONTWAIT)
				if err == syscall.EINTR {
					continue
				}
				if err == syscall.EAGAIN {
					break
				}
				if err != nil || n == 0 {
					close(d.cliEnded)
					return
				}
				for pending = append(pending, in[:n]...); len(pending) >= 16; pending = pending[16:] {
					d.update(int64(binary.BigEndian.Uint64(pending[:8])), int64(binary.BigEndian.Uint64(pending[8:16])))
				}
			}
		}
		if fds[0].revents != 0 && d.fire() {
			return
		}
	}
}

// fire acts on the times the switch has: SIGTERM, then SIGKILL, when theirs have come (a timer
// that fired for times since moved on does nothing), and reports whether the kill time has come.
func (d *deadman) fire() bool {
	var buf [8]byte
	syscall.Read(d.tfd, buf[:]) // non-blocking: clears the timer's expiry, if update has not
	now := bootNow()
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.termed && now >= d.term {
		d.termed = true
		syscall.Kill(-syscall.Getpgrp(), syscall.SIGTERM)
		d.link.Write([]byte{'T'})
	}
	if d.termed && now >= d.kill {
		d.link.Write([]byte{'K'})
		close(d.killed)
		return true
	}
	d.armLocked()
	return false
}

// supervise runs command (argv) in this process's group, which startChild made for it, and
// returns its exit status (128+N if signal N ended it; 127 if it could not be started).
//
// The supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER): whatever the command starts and
// leaves behind, even in another process group or session (setsid, a nested `leasehold run`),
// stays its descendant. It reaps them as they end, and it returns only once the command has
// ended and every descendant has been killed and reaped: the CLI releases the lease only after
// that. When the CLI at fd 3 ends, it kills its group and every descendant the same way, then
// exits. So it does at the kill time of its dead-man's switch (deadman), SIGTERM to the group
// coming first, at the stop times the CLI last gave it: in stopEnv at the start, then over fd 3.
func supervise(command []string) int {
	link := os.NewFile(3, "leasehold-link")
	syscall.CloseOnExec(3)
	os.Unsetenv(supervisorEnv)
	var term, kill int64
	_, err := fmt.Sscanf(os.Getenv(stopEnv), "%d,%d", &term, &kill)
	os.Unsetenv(stopEnv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "leasehold run: supervisor: %s: %v\n", stopEnv, err)
		return exitFail
	}
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
	dm, err := newDeadman(link, term, kill)
	if err != nil {
		fmt.Fprintf(os.Stderr, "leasehold run: supervisor: %v\n", err)
		syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		return exitFail
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
	link.Write([]byte{1}) // the command has started: see startChild
	select {
	case <-commandEnded:
	case <-dm.cliEnded:
	case <-dm.killed: // the lease was not renewed in time
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

// processGroupNote is what --help says of the command's process group on this system.
const processGroupNote = `The command runs in a process group of its own, under a small supervisor: signals, and the
stop when the lease is not renewed, go to the whole group; when the command exits, what it left
running in the group is killed (SIGKILL) before the lease is released; and if leasehold itself
dies, even by SIGKILL, the supervisor kills the group at once. The supervisor keeps the stop's
schedule itself, on its own clock, told the new deadline with every refresh: if leasehold is
stopped (SIGSTOP) or stalls, the supervisor stops the command on time all the same; if the
supervisor is the one stopped, leasehold sends SIGKILL to the group halfway from the kill time to
the deadline. The supervisor is a child subreaper: what leaves the group (setsid, daemons, a
nested leasehold run) is killed and reaped too, before the lease is released; it escapes only if
the supervisor itself is killed with SIGKILL. Being a background group, the command stops
(SIGTTIN) if it reads from a terminal, as under timeout(1): give it another stdin.`

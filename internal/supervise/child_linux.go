package supervise

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"
)

// Child is a command started by Start, in a process group of its own under a supervisor: this
// binary re-executed, which leads the group and starts the command in it.
//
// The CLI and the supervisor share a socket pair, so each sees the other end, however it ends:
//   - The supervisor holds a dead-man's switch (see deadman): it is told when to stop the command
//     (Stop: SIGTERM, then SIGKILL before the lease's deadline) at its start and after every
//     refresh, and stops it on that schedule by its own clock unless told a later one in time,
//     whatever state the CLI is in: stopped (SIGSTOP), stalled, or dead.
//   - When the CLI dies, even by SIGKILL, the supervisor reads EOF and sends SIGKILL to the rest of
//     its group and to every descendant, then exits (see runSupervisor).
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
type Child struct {
	sup      *exec.Cmd
	link     *os.File            // the CLI's end of the socket pair
	ended    chan struct{}       // closed when the supervisor has ended (not yet reaped)
	stopped  chan syscall.Signal // the signals the supervisor sent on schedule
	killed   atomic.Bool         // the supervisor reported SIGKILL sent
	backstop *time.Timer         // SIGKILL from the CLI if the supervisor has not sent it
}

// Start starts command with env, in a process group of its own under a supervisor that stops it
// at stop unless told a later time (Schedule). It returns once the command has started, or an
// error if the supervisor could not be started. A command that cannot be started is reported on
// std.Err by the supervisor, which exits 127 (Wait's status). Wait must be called once Done is
// closed: it reaps the supervisor and closes the link to it.
func Start(command, env []string, std Stdio, stop Stop) (*Child, error) {
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
		Stdin:       std.In,
		Stdout:      std.Out,
		Stderr:      std.Err,
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
	// was killed; Wait reports either.
	theirs.Close() // now the supervisor's alone: its end reads EOF when it ends
	link.Read(make([]byte, 1))
	c := &Child{sup: sup, link: link, ended: make(chan struct{}), stopped: make(chan syscall.Signal, 4)}
	go c.listen()
	c.backstop = time.AfterFunc(time.Until(backstop(stop)), c.killUnlessKilled)
	return c, nil
}

// listen reads the supervisor's reports of the signals it sent on schedule ('K': SIGKILL,
// otherwise SIGTERM) until its end of the link closes, and closes ended then.
func (c *Child) listen() {
	defer close(c.ended)
	b := make([]byte, 1)
	for {
		if _, err := c.link.Read(b); err != nil {
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
}

// backstop is when the CLI sends SIGKILL to the command's group if its supervisor has not:
// halfway from the kill time to the lease's deadline.
func backstop(s Stop) time.Time { return s.Kill.Add(s.Deadline.Sub(s.Kill) / 2) }

// killUnlessKilled kills the command's group and every descendant of the supervisor, and then
// the supervisor, unless the supervisor has sent SIGKILL or has ended.
func (c *Child) killUnlessKilled() {
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
func (c *Child) killAll() {
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
	c.Signal(syscall.SIGKILL)
}

// bootTimes returns stop's SIGTERM and SIGKILL times on the CLOCK_BOOTTIME clock, in
// nanoseconds, the clock the supervisor keeps them by.
func bootTimes(stop Stop) (term, kill int64) {
	now, boot := time.Now(), bootNow()
	return boot + int64(stop.Term.Sub(now)), boot + int64(stop.Kill.Sub(now))
}

// Schedule tells the supervisor a new stop: a later one after a refresh, or an earlier one. Once
// it has sent SIGTERM, the supervisor takes an earlier kill time only. It does not block: a
// supervisor stopped (SIGSTOP) through thousands of refreshes misses the newest, and stops the
// command on an older schedule when it runs again.
func (c *Child) Schedule(stop Stop) {
	term, kill := bootTimes(stop)
	var msg [16]byte
	binary.BigEndian.PutUint64(msg[:8], uint64(term))
	binary.BigEndian.PutUint64(msg[8:], uint64(kill))
	// Without blocking: a supervisor stopped long enough to fill the socket's buffer (thousands
	// of refreshes) misses the newer times, and stops the command early when it runs again. An
	// error otherwise means the supervisor has ended, which Done reports. (16 bytes on a Unix
	// stream socket go as one buffer, whole or not at all.)
	if rc, err := c.link.SyscallConn(); err == nil {
		rc.Write(func(fd uintptr) bool {
			syscall.Sendto(int(fd), msg[:], syscall.MSG_DONTWAIT, nil)
			return true
		})
	}
	c.backstop.Reset(time.Until(backstop(stop)))
}

// Stops reports the signals the supervisor sent on schedule: SIGTERM, then SIGKILL. A report
// that finds the channel full is dropped.
func (c *Child) Stops() <-chan syscall.Signal { return c.stopped }

// Signal sends sig to the command's whole process group.
func (c *Child) Signal(sig syscall.Signal) {
	syscall.Kill(-c.sup.Process.Pid, sig)
}

// Done is closed when the command has ended.
func (c *Child) Done() <-chan struct{} { return c.ended }

// Wait waits until Done is closed, kills what the command left running in its group, reaps the
// supervisor, and returns the command's exit status as a shell reports it: its own, 128+N if
// signal N ended it (or the supervisor), 127 if it could not be started, 1 if the supervisor
// failed.
func (c *Child) Wait() int {
	<-c.ended
	c.backstop.Stop()
	c.Signal(syscall.SIGKILL)
	err := c.sup.Wait()
	c.link.Close()
	return exitStatus(err)
}

// GroupNote is what --help says of the command's process group on this system.
const GroupNote = `The command runs in a process group of its own, under a small supervisor: signals, and the
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

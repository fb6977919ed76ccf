package supervise

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

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
	killed   chan struct{} // closed at the kill time: runSupervisor kills everything
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

//go:build unix

package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// credential is the user a server's processes run as.
type credential = syscall.Credential

// The signals the Server sends its processes.
const (
	sigKill = syscall.SIGKILL
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)

// unsupported returns nil: servers run on this system.
func unsupported() error { return nil }

// unprivileged returns the credentials to run PostgreSQL with: nil unless we are root.
func unprivileged() (*credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("leasehold-pg")
	if err != nil {
		if u, err = user.Lookup("nobody"); err != nil {
			return nil, fmt.Errorf("pgtest: running as root, and neither user leasehold-pg nor nobody exists to run PostgreSQL as: %w", err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// commandAs returns a command that runs path as cred (nil: as this process), in a process group
// of its own.
func commandAs(cred *credential, path string, args ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	cmd.Dir = os.TempDir() // a directory the unprivileged user can enter
	return cmd
}

// chown gives path to the unprivileged user, if there is one.
func chown(cred *credential, path string) error {
	if cred == nil {
		return nil
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}

// signal sends sig to the server: the postmaster and every process it started. Each backend is
// a process group of its own (PostgreSQL makes it one), so they are found by their parent: the
// postmaster is stopped first, so that it starts none meanwhile.
func (s *Server) signal(sig syscall.Signal) []int {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	pm := s.cmd.Process.Pid
	if sig != syscall.SIGCONT {
		syscall.Kill(pm, syscall.SIGSTOP)
	}
	kids := children(pm)
	for _, pid := range kids {
		syscall.Kill(pid, sig)
	}
	syscall.Kill(pm, sig)
	if sig != syscall.SIGCONT && sig != syscall.SIGKILL && sig != syscall.SIGSTOP {
		syscall.Kill(pm, syscall.SIGCONT) // it was stopped only to hold its children still
	}
	return kids
}

// gone reports whether pid has exited (or is a zombie, holding nothing).
func gone(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// children returns the pids of the processes whose parent is pid.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces and parentheses, so read after the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
				pids = append(pids, child)
			}
		}
	}
	return pids
}

// Package servers starts throwaway redis-server processes for the benchmark command, with the
// flags backend/redistest uses for tests: each listens on a free loopback port, keeps nothing on
// disk, and is stopped by pid.
package servers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server is a running redis-server started by Start.
type Server struct {
	// Addr is the server's host:port.
	Addr   string
	cmd    *exec.Cmd
	dir    string
	exited chan struct{}
	once   sync.Once
}

// Start starts a standalone redis-server on a free loopback port and waits until it answers
// PING. The caller must Stop it.
func Start() (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (apt-get install -y redis-server): %w", err)
	}
	var last error
	for range 3 {
		s, err := start(bin)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

func start(bin string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "peerbench-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, exited: make(chan struct{})}
	s.cmd = exec.Command(bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--logfile", "")
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(10 * time.Second); err != nil {
		s.Stop()
		return nil, fmt.Errorf("redis-server on %s: %w", s.Addr, err)
	}
	return s, nil
}

// Pid returns the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop kills the server by pid (SIGKILL), waits for it to exit and removes its directory. It is
// safe to call more than once.
func (s *Server) Stop() {
	s.once.Do(func() {
		s.cmd.Process.Kill()
		<-s.exited
		os.RemoveAll(s.dir)
	})
}

// Version returns the server's redis_version.
func (s *Server) Version() (string, error) {
	info, err := Do(s.Addr, "INFO", "server")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", errors.New("no redis_version in INFO server")
}

func (s *Server) waitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("exited early: %v", s.cmd.ProcessState)
		default:
		}
		reply, err := Do(s.Addr, "PING")
		if err == nil && strings.HasPrefix(reply, "+PONG") {
			return nil
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %v: %v", within, last)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Do sends one command to addr over a connection of its own and returns the first line of the
// reply, or the whole of a bulk-string reply.
func Do(addr string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(line, "$") {
		return line, nil
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	if n < 0 {
		return "", nil
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

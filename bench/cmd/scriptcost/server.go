package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/backend/redistest"
)

// server is a redis-server running under callgrind, its dumps written to dir.
type server struct {
	addr    string
	dir     string
	cmd     *exec.Cmd
	version string // redis_version from INFO server
}

// launch starts redis-server under valgrind --tool=callgrind on a free loopback port, keeping
// nothing on disk, and waits until it answers PING. It names the binary that is missing, if one
// is. The caller stops the server with close, which also removes dir.
func launch(ctx context.Context) (*server, error) {
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		return nil, errors.New("valgrind not found on PATH (apt-get install -y valgrind): it runs redis-server under callgrind")
	}
	if _, err := exec.LookPath("callgrind_control"); err != nil {
		return nil, errors.New("callgrind_control not found on PATH (it comes with valgrind): it zeroes and dumps the counts")
	}
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found on PATH (apt-get install -y redis-server)")
	}
	dir, err := os.MkdirTemp("", "scriptcost-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir}
	s.cmd = exec.Command(valgrind, "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "cg.%p"),
		redis, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--logfile", "")
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start valgrind redis-server: %w", err)
	}
	err = waitFor(ctx, time.Minute, "redis-server under callgrind on "+s.addr+" answers PING", func() (bool, error) {
		reply, err := redistest.Do(s.addr, "PING")
		return err == nil && strings.HasPrefix(reply, "+PONG"), nil
	})
	if err == nil {
		s.version, err = redisVersion(s.addr)
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// pid is the process id of the server: valgrind runs it in its own process.
func (s *server) pid() int { return s.cmd.Process.Pid }

// close stops the server by pid, SIGTERM then SIGKILL if it has not exited within 10 s, and
// removes its directory. It is safe to call more than once.
func (s *server) close() {
	if s.cmd.ProcessState == nil {
		done := make(chan struct{})
		go func() {
			s.cmd.Wait()
			close(done)
		}()
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			<-done
		}
	}
	os.RemoveAll(s.dir)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// redisVersion returns the redis_version of the server at addr.
func redisVersion(addr string) (string, error) {
	info, err := redistest.Do(addr, "INFO", "server")
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

// waitFor polls cond every 20 ms until it holds, it fails, ctx ends or within has passed.
func waitFor(ctx context.Context, within time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting until %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %v", what, within)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting until %s: %w", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Package etcdtest starts real etcd servers for the tests of the etcd driver: single-member
// clusters on free loopback ports, each with its data in a temporary directory, each a process
// of its own that a test can pause (SIGSTOP), kill and restart on its data, stopped by pid when
// the test ends.
//
// # Why etcd's embedded server, in a process of its own
//
// The server is etcd's own, from go.etcd.io/etcd/server/v3/embed at the same version as the
// client this module requires, so the tests run against the server the driver is written for
// and nothing is installed: a test never skips for a missing binary, and CI needs no apt step.
// Debian's etcd-server package was the other choice; bookworm ships etcd 3.4, older than the
// client, and it would have to be installed on every machine that runs the tests.
//
// The embedded server does not run inside the test's process: a fault test must stop the
// server's clock (SIGSTOP), kill it without a goodbye (SIGKILL) and restart it on its data
// directory, and only a process can be paused or killed on its own. So Start re-executes the
// test binary with an environment variable that makes Main serve instead of running tests. The
// server process dies with the test binary: Linux sends it SIGKILL when its parent dies
// (Pdeathsig), it exits when its standard input, a pipe from the parent, reaches end of file,
// and the parent kills it by pid when the test ends. None outlives the test run. Under the race
// detector the server is instead a binary built once, without it, from package server beside
// this one (go build, in the module cache's usual way): etcd instrumented for races ran several
// times slower, and under a whole package's tests at once it was the server, not the driver,
// that tests measured.
//
// # Settings
//
// Every server is a single member with a heartbeat interval of 50 ms and an election timeout of
// 500 ms. etcd's minimum lease TTL is ceil(1.5 × election timeout): 2 s with etcd's default
// election timeout of 1 s, 1 s here. The driver rounds a TTL up to whole seconds, and etcd
// raises a lease granted below its minimum to the minimum, so a lease of 1 s is 1 s here, as on
// a cluster whose election timeout is at most 666 ms, and 2 s on a cluster of defaults. The server writes
// its log (level warn) to etcd.log in its directory, not to the test's output. Its backend quota
// is 256 MiB, auto-compaction is off (the tests compact nothing behind the driver's back), and
// fsync is off: a SIGKILL of the process loses nothing written, since the kernel keeps what the
// process wrote; only a crash of the machine would, which no test makes.
//
// # What fault tests see
//
// These are etcd's behaviours (v3.7), measured with these settings. etcd looks for expired
// leases every 500 ms, so a key on a lease of 1 s is deleted 1 to 1.5 s after the grant. A server
// paused past a lease's TTL revokes the lease as it resumes, within milliseconds, and refuses
// its keep-alive ("requested lease not found"). A killed server forgets how long its leases had
// left: when it restarts and becomes leader again, it renews every lease to its full TTL plus
// the election timeout (a lease of 5 s with 2 s left before the kill lives 5.5 s more).
//
// # Use
//
// A package whose tests start servers calls Main from its TestMain. Tests that only need a
// server share one (Shared); tests that pause, kill or restart one start their own (Start).
package etcdtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/backend/internal/faultproxy"
	"github.com/leasehold/leasehold/internal/poll"
)

// Main runs the tests of a package that starts servers; call it from TestMain: os.Exit is called
// by it. When the process was started by Start as a server, it serves instead and never returns.
// After the tests it stops the shared server and, when they passed, fails the run if any
// goroutine outlived them (goleak), so a TestMain that calls Main needs no leak check of its own.
func Main(m *testing.M) {
	Serve()
	code := m.Run()
	shared.mu.Lock()
	if shared.srv != nil {
		shared.srv.stop()
		os.RemoveAll(shared.srv.dir)
	}
	shared.mu.Unlock()
	if server.dir != "" {
		os.RemoveAll(server.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Server is a single-member etcd cluster in a process of its own. Its methods are safe for
// concurrent use.
type Server struct {
	dir    string // holds data/, etcd.log and server.out
	client int    // the client port
	peer   int    // the peer port

	mu   sync.Mutex
	proc *process // nil once killed
}

// Start starts a new single-member etcd on free loopback ports (client and peer), data in a temp
// dir, stopped by pid at t.Cleanup. It returns once the server answers (a Get succeeds). When no
// server can be started the test fails under CI=true and is skipped otherwise, with the reason.
func Start(t testing.TB) *Server {
	t.Helper()
	dir := t.TempDir() // removed after the cleanup below, which runs first
	s, err := launch(dir)
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(func() {
		if s.stop() {
			t.Errorf("etcdtest: the server on %s exited before the test ended; its output: %s",
				s.Endpoint(), tail(filepath.Join(s.dir, "server.out")))
		}
	})
	return s
}

var shared struct {
	mu  sync.Mutex
	srv *Server
	err error
}

// Shared returns one server per test binary, started on first use and stopped when Main's m.Run
// returns (by pid). Tests that share it keep to keys of their own and leave it running: a test
// that pauses, kills or restarts a server starts its own. When it cannot be started, every test
// that asks for it fails under CI=true and is skipped otherwise.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.mu.Lock()
	if shared.srv == nil && shared.err == nil {
		dir, err := os.MkdirTemp("", "etcdtest-")
		if err == nil {
			shared.srv, err = launch(dir)
			if err != nil {
				os.RemoveAll(dir)
			}
		}
		shared.err = err
	}
	s, err := shared.srv, shared.err
	shared.mu.Unlock()
	if err != nil {
		unavailable(t, err)
	}
	return s
}

// unavailable fails t under CI=true and skips it otherwise, saying why no server could start.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(err)
	}
	t.Skipf("%v (under CI=true this fails the test)", err)
}

// Endpoint returns the URL of the server's client port, "http://127.0.0.1:PORT".
func (s *Server) Endpoint() string { return fmt.Sprintf("http://127.0.0.1:%d", s.client) }

// Client returns a client of the server's Endpoint, or of endpoints when given (a fault proxy's
// address, say), closed when t ends. It dials without blocking: its first request connects.
func (s *Server) Client(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = []string{s.Endpoint()}
	}
	c, err := newClient(endpoints...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newClient(endpoints ...string) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(), // the client's retry warnings would fill the test's output
	})
	if err != nil {
		return nil, fmt.Errorf("etcdtest: client of %v: %w", endpoints, err)
	}
	return c, nil
}

// Pause stops the server's process (SIGSTOP) and returns once all its threads have stopped: it
// answers nothing, and its connections stay open, until Resume. Its clock goes on: leases past
// their TTL meanwhile expire when it resumes.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	pid := s.signal(t, sigStop)
	poll.Until(t, "the server's threads all stopped after SIGSTOP", func() bool { return stopped(pid) })
}

// Resume continues a paused server's process (SIGCONT), which is at once: the kernel wakes its
// threads as it takes the signal.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, sigCont)
}

// signal sends sig to the server's process and returns its pid.
func (s *Server) signal(t testing.TB, sig syscall.Signal) int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		t.Fatalf("etcdtest: %v to a server that was killed", sig)
	}
	pid := s.proc.cmd.Process.Pid
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("etcdtest: %v to pid %d: %v", sig, pid, err)
	}
	return pid
}

// Kill kills the server's process (SIGKILL, paused or not) and waits for it to exit. Its data
// stay, for Restart.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.stop()
}

// stop kills the server's process by pid, if it runs, and waits for it to exit. It reports
// whether the process had exited by itself, which nothing in a test should make it do.
func (s *Server) stop() (exited bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		exited = s.proc.kill()
		s.proc = nil
	}
	return exited
}

// Restart starts the server again on its data directory and ports, killing it first if it runs,
// and returns once it answers. Clients of the server (or of a proxy in front of it) reconnect.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
		s.proc = nil
	}
	// The ports were free a moment ago and the listeners reuse addresses, so a failure is
	// rare: someone else took a port meanwhile, or the machine stalled. Try a few times.
	var err error
	for range 3 {
		if s.proc, err = s.run(); err == nil {
			return
		}
	}
	t.Fatalf("etcdtest: restart: %v", err)
}

// Proxy returns a fault proxy in front of the server's client port, closed when t ends: a client
// of its Addr (Client(t, "http://"+p.Addr)) reaches the server through it.
func (s *Server) Proxy(t testing.TB) *faultproxy.Proxy {
	t.Helper()
	return faultproxy.Start(t, fmt.Sprintf("127.0.0.1:%d", s.client))
}

// answer waits until a Get of the server succeeds, for at most within.
func (s *Server) answer(within time.Duration) error {
	c, err := newClient(s.Endpoint())
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Get(ctx, "etcdtest-ready")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcdtest: server on %s does not answer after %v: %w", s.Endpoint(), within, err)
		}
		time.Sleep(20 * time.Millisecond) // a poll: the server said it was ready
	}
}

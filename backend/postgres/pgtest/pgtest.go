// Package pgtest starts throwaway PostgreSQL servers for tests: each listens on a free loopback
// port with trust authentication for the user postgres, keeps its data in a temporary directory
// (fsync off, but every commit written before it returns, so a SIGKILL loses nothing committed),
// and is stopped by pid when the test ends.
//
// It needs PostgreSQL's server binaries (initdb, postgres): on PATH, or where Debian's
// postgresql package puts them, /usr/lib/postgresql/<version>/bin. Without them the test is
// skipped with a message saying so, except under CI=true, where a missing server fails it. As
// root, which PostgreSQL refuses, the server runs as the user leasehold-pg when it exists, else
// as nobody.
//
// The first server of a version made by a user initializes a template data directory (initdb,
// about a second and a half) under the system's temporary directory and keeps it; every server
// starts from a copy of it.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Server is a running PostgreSQL server.
type Server struct {
	// URL reaches the server's database postgres as the superuser postgres.
	URL  string
	Port int

	bin  string // the server binaries' directory
	dir  string // the data directory's parent: removed by Close
	data string
	cred *credential // the unprivileged user the server runs as, when we are root
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartServer starts a server and returns it; it is stopped, and its data removed, when t ends.
// Without PostgreSQL's binaries the test is skipped, or fails under CI=true.
func StartServer(t testing.TB) *Server {
	t.Helper()
	if err := unsupported(); err != nil {
		t.Skip(err)
	}
	if _, err := binDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	s, err := Launch()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Launch starts a server on a free loopback port and waits until it answers. It is StartServer
// for programs: the caller stops it with Close.
func Launch() (*Server, error) {
	if err := unsupported(); err != nil {
		return nil, err
	}
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := unprivileged()
	if err != nil {
		return nil, err
	}
	tmpl, err := template(bin, cred)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, data: filepath.Join(dir, "data"), cred: cred}
	if err := s.prepare(tmpl); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for range 3 { // a port found free may be taken before the server binds it
		if s.Port, err = freePort(); err != nil {
			break
		}
		s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port)
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, err
}

// binDir returns the directory of initdb and postgres.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	slices.SortFunc(versions, func(a, b string) int { return version(b) - version(a) })
	if len(versions) > 0 {
		return filepath.Dir(versions[0]), nil
	}
	return "", errors.New("pgtest: PostgreSQL's initdb and postgres not found on PATH nor under /usr/lib/postgresql/*/bin; install them (apt-get install -y postgresql) to run this test")
}

// version returns the major version in a path /usr/lib/postgresql/<version>/bin/postgres.
func version(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

// command returns a command that runs as the unprivileged user when there is one.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	return commandAs(s.cred, filepath.Join(s.bin, name), args...)
}

// template returns a data directory made by initdb for this version and user, making it the
// first time (into a directory of its own, renamed into place, so concurrent test processes
// agree on one).
func template(bin string, cred *credential) (string, error) {
	uid := os.Geteuid()
	if cred != nil {
		uid = int(cred.Uid)
	}
	dest := filepath.Join(os.TempDir(), fmt.Sprintf("leasehold-pgtest-template-%s-%d", strings.ReplaceAll(bin, "/", "_"), uid))
	if _, err := os.Stat(filepath.Join(dest, "PG_VERSION")); err == nil {
		return dest, nil
	}
	work, err := os.MkdirTemp("", "pgtest-initdb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil {
		return "", err
	}
	data := filepath.Join(work, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return "", err
	}
	if err := chown(cred, data); err != nil {
		return "", err
	}
	cmd := commandAs(cred, filepath.Join(bin, "initdb"), "-D", data, "--auth=trust", "-U", "postgres", "-N", "-E", "UTF8", "--locale=C")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	if err := os.Rename(data, dest); err != nil {
		if _, serr := os.Stat(filepath.Join(dest, "PG_VERSION")); serr == nil {
			return dest, nil // another process made it first
		}
		return "", err
	}
	return dest, nil
}

// prepare copies the template into the server's data directory.
func (s *Server) prepare(tmpl string) error {
	if err := os.Chmod(s.dir, 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", tmpl, s.data).CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: copy the template data directory: %w\n%s", err, out)
	}
	return nil
}

// freePort returns a loopback port that is free now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start starts the server's process on s.Port and waits until it answers a query.
func (s *Server) start() error {
	s.cmd = s.command("postgres", "-D", s.data, "-p", strconv.Itoa(s.Port), "-k", s.data,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "synchronous_commit=on", "-c", "max_connections=300", "-c", "shared_buffers=32MB",
		"-c", "logging_collector=off", "-c", "log_min_messages=warning")
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	if err := s.waitReady(30 * time.Second); err != nil {
		s.signal(sigKill)
		<-s.done
		return fmt.Errorf("pgtest: postgres on port %d: %w\n%s", s.Port, err, s.logTail())
	}
	return nil
}

func (s *Server) waitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.URL)
		var dataDir string
		if err == nil {
			err = conn.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			if dataDir != s.data {
				// The port, found free, was taken before this server could bind it (this one
				// then exits): a test would otherwise use someone else's server.
				return fmt.Errorf("another server (data directory %s) answers there", dataDir)
			}
			return nil
		}
		select {
		case <-s.done:
			return errors.New("the server exited")
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logTail returns the end of the server's log.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Pid returns the postmaster's pid.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Kill SIGKILLs the server — the postmaster and every backend — and waits until it has exited.
// Its data stays: Restart brings it back after crash recovery, with everything committed.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	kids := s.signal(sigKill)
	<-s.done
	// Wait until no backend is left to hold the data directory and shared memory.
	for range 500 {
		if !slices.ContainsFunc(kids, func(pid int) bool { return !gone(pid) }) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pgtest: backends of the server %d outlived SIGKILL", s.cmd.Process.Pid)
}

// Restart starts the server again on the same port and data, after Kill (or a crash), and waits
// until it answers.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	select {
	case <-s.done:
	default:
		s.Kill(t)
	}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// Pause stops the server (SIGSTOP to every process of it): connections stay open and nothing
// answers until Resume.
func (s *Server) Pause() { s.signal(sigStop) }

// Resume continues a paused server.
func (s *Server) Resume() { s.signal(sigCont) }

// Pool returns a pool to the server, closed when t ends.
func (s *Server) Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Close stops the server (a fast shutdown, SIGKILL after five seconds) and removes its data.
// It is idempotent.
func (s *Server) Close() {
	if s.cmd != nil {
		s.signal(sigCont) // a paused server cannot shut down
		s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			s.signal(sigKill)
			<-s.done
		}
		s.signal(sigKill) // any backend left behind
	}
	os.RemoveAll(s.dir)
}

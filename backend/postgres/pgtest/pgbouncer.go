package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartPgBouncer starts PgBouncer in transaction mode (every statement outside a transaction may
// go to another server connection, and no session state lasts) in front of s, on a free loopback
// port, and returns the URL that reaches s's database postgres through it, with pgx told to send
// unnamed statements (default_query_exec_mode=exec), which such a pool needs before PgBouncer
// 1.21. It is stopped when t ends. Without pgbouncer (on PATH or in /usr/sbin) the test is
// skipped, or fails under CI=true.
func StartPgBouncer(t testing.TB, s *Server) string {
	t.Helper()
	return StartPgBouncerMode(t, s, "transaction")
}

// StartPgBouncerMode is StartPgBouncer with PgBouncer's pool_mode set to mode ("session",
// "transaction" or "statement"), and each of settings ("name = value") added to its
// configuration. In session mode a client's server connection is its own until it disconnects;
// PgBouncer then resets it (DISCARD ALL) and keeps it for the next client.
func StartPgBouncerMode(t testing.TB, s *Server, mode string, settings ...string) string {
	t.Helper()
	bin := pgBouncerBinary(t)
	dir, err := os.MkdirTemp("", "pgtest-pgbouncer-") // not t.TempDir: its parent is closed to other users
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil { // the unprivileged user writes its log there
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = %s
max_client_conn = 1000
default_pool_size = 10
logfile = %s
%s
`, s.Port, port, mode, filepath.Join(dir, "pgbouncer.log"), strings.Join(settings, "\n"))
	path := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := commandAs(s.cred, bin, path) // PgBouncer will not run as root either
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&default_query_exec_mode=exec", port)
	awaitPgBouncer(t, s, url, filepath.Join(dir, "pgbouncer.log"), exited)
	return url
}

// pgBouncerBinary returns the path of pgbouncer (on PATH or in /usr/sbin); without it the test
// is skipped, or fails under CI=true.
func pgBouncerBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err == nil {
		return bin
	}
	bin = "/usr/sbin/pgbouncer"
	if _, serr := os.Stat(bin); serr != nil {
		msg := "pgtest: pgbouncer not found; install it (apt-get install -y pgbouncer) to run this test"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// awaitPgBouncer waits up to ten seconds until the PgBouncer started for s answers at url with
// s's database, and fails t when another server answers there, the time is up, or it exited
// (closed exited), with its log.
func awaitPgBouncer(t testing.TB, s *Server, url, logPath string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, url)
		var dataDir string
		if err == nil {
			err = conn.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir)
			conn.Close(ctx)
		}
		cancel()
		switch {
		case err == nil && dataDir != s.data:
			// Another pgbouncer took the port first (this one exits): not ours.
			t.Fatalf("pgtest: pgbouncer at %s: another pgbouncer answers there (its server's data directory %s)", url, dataDir)
		case err == nil:
			return
		case time.Now().After(deadline):
			log, _ := os.ReadFile(logPath)
			t.Fatalf("pgtest: pgbouncer at %s: %v\n%s", url, err, log)
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			t.Fatal(errors.New("pgtest: pgbouncer exited\n" + string(log)))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

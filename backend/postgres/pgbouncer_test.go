package postgres_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
)

// startPgBouncer starts pgbouncer in transaction mode in front of the server at serverURL, on a
// free loopback port, and returns the URL that reaches the server through it; it is stopped when
// t ends. Without pgbouncer the test is skipped, or fails under CI=true.
func startPgBouncer(t *testing.T, serverURL string) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			msg := "pgbouncer not found; install it (apt-get install -y pgbouncer) to run this test"
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		bin = "/usr/sbin/pgbouncer"
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := fmt.Sprintf(`[databases]
* = host=%s port=%s user=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 10
logfile = %s
`, u.Hostname(), u.Port(), u.User.Username(), port, filepath.Join(dir, "pgbouncer.log"))
	path := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, path)
	if os.Geteuid() == 0 { // pgbouncer will not run as root
		nobody, err := user.Lookup("nobody")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(nobody.Uid)
		gid, _ := strconv.Atoi(nobody.Gid)
		os.Chmod(dir, 0o777)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
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
	through := *u
	through.Host = fmt.Sprintf("127.0.0.1:%d", port)
	waitFor(t, "pgbouncer to answer", func() bool {
		conn, err := pgx.Connect(context.Background(), through.String()+"?default_query_exec_mode=exec")
		if err != nil {
			return false
		}
		defer conn.Close(context.Background())
		return conn.Ping(context.Background()) == nil
	})
	return through.String()
}

// TestConformanceThroughPgBouncer: the suite passes with every operation going through PgBouncer
// in transaction mode (PgBouncer 1.18 keeps no prepared statements, so the pool sends unnamed
// ones: default_query_exec_mode=exec), and the listening connection reaching the server
// directly (WithListenDSN), as the package doc says to set it up.
func TestConformanceThroughPgBouncer(t *testing.T) {
	direct := serverURL(t)
	bouncer := startPgBouncer(t, direct) + "?default_query_exec_mode=exec"
	conformance.Run(t, bouncerHarness{pooled: bouncer, direct: direct})
}

type bouncerHarness struct{ pooled, direct string }

func (h bouncerHarness) NewStore(t *testing.T) core.Store {
	pool, err := pgxpool.New(context.Background(), h.pooled)
	if err != nil {
		t.Fatal(err)
	}
	s, err := postgres.New(pool, postgres.WithListenDSN(h.direct))
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		pool.Close()
	})
	return s
}

func (bouncerHarness) Advance(time.Duration) bool { return false }

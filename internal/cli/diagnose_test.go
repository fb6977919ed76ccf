package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// storeFailureCase is a command line that must fail to use its store, and the start of the one
// line it must say.
type storeFailureCase struct {
	args []string
	want string
}

// checkStoreFailures runs the command lines at once (most wait seconds for a server that does
// not answer) and checks that each fails (exit 1) before running anything, with one line on
// stderr that starts with its want.
func checkStoreFailures(t *testing.T, cases []storeFailureCase) {
	t.Helper()
	var wg sync.WaitGroup
	for _, tc := range cases {
		wg.Go(func() {
			var out, errOut strings.Builder
			code := run(t.Context(), tc.args, &out, &errOut)
			if code != exitFail || out.Len() != 0 || !strings.HasPrefix(errOut.String(), tc.want) || strings.Count(errOut.String(), "\n") != 1 {
				t.Errorf("%q: exit %d, stdout %q, stderr %q\nwant %d, nothing run, and one line starting %q",
					tc.args, code, out.String(), errOut.String(), exitFail, tc.want)
			}
		})
	}
	wg.Wait()
}

// listen returns the address of a loopback TCP listener that handles each connection with
// serve (on a goroutine of its own), until the test ends.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// silent reads what it is sent and never answers.
func silent(c net.Conn) {
	buf := make([]byte, 512)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// hangUp closes the connection at once.
func hangUp(c net.Conn) { c.Close() }

// httpServer returns the address of an HTTP server that answers 404 to everything.
func httpServer(t *testing.T) string {
	s := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

// TestRedisFailuresSayWhatFailed: a -redis server that cannot be used is reported in one line
// that says what failed, by either driver: authentication, no such database, a TLS handshake
// with a plain server, a server that is not Redis (HTTP, PostgreSQL, silent, hanging up), or
// nothing there at all (unreachable).
func TestRedisFailuresSayWhatFailed(t *testing.T) {
	testenv.SkipShort(t, "waits out the CLI's timeouts for servers that do not answer")
	t.Parallel()
	locked := redistest.StartServer(t)
	if _, err := redistest.Do(locked.Addr, "CONFIG", "SET", "requirepass", "secret"); err != nil {
		t.Fatal(err)
	}
	plain := redistest.StartServer(t)
	pg := fmt.Sprintf("127.0.0.1:%d", pgServer(t).Port)
	web, quiet, rude := httpServer(t), listen(t, silent), listen(t, hangUp)

	var cases []storeFailureCase
	for _, tc := range []struct {
		name, url, want string
	}{
		{"wrong password", "redis://:wrong@" + locked.Addr, "redis " + locked.Addr + ": authentication failed: WRONGPASS"},
		{"no password", "redis://" + locked.Addr, "redis " + locked.Addr + ": authentication failed: the server wants a password and none was given (redis://[user]:password@host:port): NOAUTH"},
		{"no such database", "redis://" + plain.Addr + "/99", "redis " + plain.Addr + ": no such database /99: "},
		{"TLS with a plain server", "rediss://" + plain.Addr, "redis " + plain.Addr + ": TLS handshake failed: the server speaks plain Redis, not TLS (use redis://, not rediss://)"},
		{"HTTP", "redis://" + web, "redis " + web + `: not a Redis server: it answers HTTP ("HTTP/1.0 404 Not Found")`},
		{"PostgreSQL", "redis://" + pg, "redis " + pg + ": not a Redis server: it is a PostgreSQL server (use -postgres)"},
		{"silent", "redis://" + quiet, "redis " + quiet + ": not a Redis server, or a stalled one: it accepts connections but does not answer PING within 1s"},
		{"hanging up", "redis://" + rude, "redis " + rude + ": not a Redis server, or one that wants TLS (rediss://): it closes the connection without a reply"},
		{"nothing there", "redis://127.0.0.1:1", "redis 127.0.0.1:1 unreachable: dial tcp 127.0.0.1:1: connect: connection refused"},
	} {
		for _, driver := range []string{driverGoredis, driverValkey} {
			cases = append(cases,
				storeFailureCase{[]string{"run", "-redis", tc.url, "-driver", driver, "-key", "k", "--", "echo", "ran"}, "leasehold run: " + tc.want},
				storeFailureCase{[]string{"inspect", "-redis", tc.url, "-driver", driver, "k"}, "leasehold inspect: " + tc.want})
		}
	}
	checkStoreFailures(t, cases)
}

// TestRedlockNamesWhatFailedOnEachServer: over Redlock, a server that cannot be used is named
// in one line that says what failed, and the command goes on with a quorum.
func TestRedlockNamesWhatFailedOnEachServer(t *testing.T) {
	t.Parallel()
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	web := httpServer(t)
	code, _, errOut := runArgs(t, t.Context(), "run", "-redis", a.Addr, "-redis", b.Addr+"/99", "-redis", web, "-key", "k", "--", "true")
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if code != exitFail || len(lines) != 3 ||
		!strings.HasPrefix(lines[0], "leasehold run: redis "+b.Addr+": no such database /99: ") || !strings.HasSuffix(lines[0], "; too few answer") ||
		lines[1] != "leasehold run: redis "+web+`: not a Redis server: it answers HTTP ("HTTP/1.0 404 Not Found"); too few answer` ||
		lines[2] != "leasehold run: only 1 of 3 Redis servers answer; Redlock needs 2 (a majority)" {
		t.Errorf("exit %d, stderr:\n%s\nwant %d, a line for each failed server saying what failed, and the verdict", code, errOut, exitFail)
	}
}

// TestPostgresFailuresSayWhatFailed: a -postgres database that cannot be used is reported in one
// line that says what failed: authentication (a bad password, SQLSTATE 28P01; an unknown role,
// 28000), no such database (3D000), a server that is not PostgreSQL (Redis, HTTP), or nothing
// there at all (unreachable).
func TestPostgresFailuresSayWhatFailed(t *testing.T) {
	testenv.SkipShort(t, "waits out the CLI's timeouts for servers that do not answer")
	t.Parallel()
	srv := pgServer(t)
	pg := fmt.Sprintf("127.0.0.1:%d", srv.Port)
	redisAddr := redistest.StartServer(t).Addr
	web := httpServer(t)
	tests := []struct {
		url, want string
	}{
		{"postgres://nosuch@" + pg + "/postgres", "postgres " + pg + `: authentication failed: role "nosuch" does not exist (SQLSTATE 28000)`},
		{"postgres://postgres@" + pg + "/nosuch", "postgres " + pg + `: no such database: database "nosuch" does not exist (SQLSTATE 3D000)`},
		{"postgres://postgres@" + redisAddr + "/postgres", "postgres " + redisAddr + ": not a PostgreSQL server: it answers as a Redis server does (use -redis)"},
		{"postgres://postgres@" + web + "/postgres", "postgres " + web + `: not a PostgreSQL server: it answers HTTP ("HTTP/1.0 404 Not Found")`},
		{"postgres://postgres@127.0.0.1:1/postgres", "postgres 127.0.0.1:1 unreachable: "},
	}
	if role := unique("pwuser"); requirePassword(t, srv.URL, role, "secret") {
		tests = append(tests, struct{ url, want string }{"postgres://" + role + ":wrong@" + pg + "/postgres",
			"postgres " + pg + `: authentication failed: password authentication failed for user "` + role + `" (SQLSTATE 28P01)`})
	}
	var cases []storeFailureCase
	for _, tc := range tests {
		cases = append(cases,
			storeFailureCase{[]string{"run", "-postgres", tc.url, "-key", "k", "--", "echo", "ran"}, "leasehold run: " + tc.want},
			storeFailureCase{[]string{"elect", "-postgres", tc.url, "-observe", "k"}, "leasehold elect: " + tc.want})
	}
	checkStoreFailures(t, cases)
}

// requirePassword makes the server at url ask role (which it creates) for password over TCP,
// and reports whether it could: it edits the server's pg_hba.conf, which only the server's
// user or root may write.
func requirePassword(t *testing.T, url, role, password string) bool {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, password)); err != nil {
		t.Fatal(err)
	}
	var hba string
	if err := conn.QueryRow(t.Context(), "SHOW hba_file").Scan(&hba); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(hba)
	if err == nil {
		err = os.WriteFile(hba, append([]byte("host all "+role+" 127.0.0.1/32 scram-sha-256\n"), old...), 0)
	}
	if err != nil {
		t.Logf("no password authentication to test: %v", err)
		return false
	}
	var ok bool
	if err := conn.QueryRow(t.Context(), "SELECT pg_reload_conf()").Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_reload_conf: %v %v", ok, err)
	}
	// The server reloads its configuration after the call returns: wait until it asks.
	poll.For(t, "the server to ask "+role+" for a password", func() (error, bool) {
		var pe *pgconn.PgError
		c, err := pgx.Connect(t.Context(), strings.Replace(url, "postgres@", role+":wrong@", 1))
		if err == nil {
			c.Close(context.Background())
		}
		return err, errors.As(err, &pe) && pe.Code == "28P01"
	})
	return true
}

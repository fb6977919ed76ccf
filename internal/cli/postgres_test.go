package cli

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// pgShared is the package's PostgreSQL server: its tests use keys and roles of their own on it.
var pgShared struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

// pgServer returns the package's PostgreSQL server, started on first use and stopped by
// TestMain. Without PostgreSQL the test is skipped, or fails under CI=true.
func pgServer(t *testing.T) *pgtest.Server {
	t.Helper()
	pgShared.once.Do(func() { pgShared.srv, pgShared.err = pgtest.Launch() })
	if pgShared.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(pgShared.err)
		}
		t.Skip(pgShared.err)
	}
	return pgShared.srv
}

// unique returns name with a random suffix: a key or role no other run of a test on the
// package's server uses (-count, a lease left to expire by a process the test killed).
func unique(name string) string {
	var b [4]byte
	rand.Read(b[:])
	return name + "_" + hex.EncodeToString(b[:])
}

func TestBadPostgresFlagsAreUsageErrors(t *testing.T) {
	checkUsageErrors(t, []struct {
		args []string
		want string
	}{
		{[]string{"run", "-postgres", "postgres://%zz", "-key", "k", "--", "true"}, "leasehold run: -postgres: cannot parse"},
		{[]string{"run", "-postgres", "postgres://h/db", "-redis", "127.0.0.1:6379", "-key", "k", "--", "true"}, "leasehold run: -redis and -postgres: give one store, not both"},
		{[]string{"run", "-postgres", "postgres://h/db", "-pg-prefix", "Bad-Prefix", "-key", "k", "--", "true"}, `leasehold run: -pg-schema "public", -pg-prefix "Bad-Prefix": `},
		{[]string{"run", "-postgres", "postgres://h/db", "-pg-listen", "postgres://%zz", "-key", "k", "--", "true"}, "leasehold run: -pg-listen: cannot parse"},
		{[]string{"inspect", "-postgres", "postgres://h/db", "-pg-schema", "a$b", "k"}, `leasehold inspect: -pg-schema "a$b", -pg-prefix "leasehold_": `},
		{[]string{"elect", "-postgres", "postgres://%zz", "-observe", "k"}, "leasehold elect: -postgres: cannot parse"},
	})
}

// TestPostgresUnreachableIsOneLine: a database that does not answer is reported in one line, and
// the command does not run.
func TestPostgresUnreachableIsOneLine(t *testing.T) {
	t.Parallel()
	code, out, errOut := runArgs(t, t.Context(), "run", "-postgres", "postgres://postgres@127.0.0.1:1/x", "-key", "k", "--", "echo", "ran")
	if code != exitFail || out != "" || !strings.HasPrefix(errOut, "leasehold run: postgres 127.0.0.1:1 unreachable: ") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d, nothing run, one line naming the database", code, out, errOut, exitFail)
	}
}

// TestPostgresRunInspectAndElect: run holds a lease on PostgreSQL while its command runs, with its
// default value; inspect shows it and the waiting line; elect -observe sees a leader's value.
func TestPostgresRunInspectAndElect(t *testing.T) {
	testenv.SkipShort(t, "starts PostgreSQL")
	t.Parallel()
	url, deploy, job := pgServer(t).URL, unique("deploy"), unique("job")
	var out syncBuffer
	holder, stdin := startCLI(t, &out, "run", "-postgres", url, "-key", deploy, "--", "sh", "-c", "read x; exit 3")
	waitInspect(t, url, deploy, "1", "1 holder(s)")
	host, _ := os.Hostname()
	waitInspect(t, url, deploy, "1", fmt.Sprintf(`"%s pid %d: sh -c 'read x;`, host, holder.pid)) // the table cuts the rest

	var wout syncBuffer
	waiter, _ := startCLI(t, &wout, "run", "-postgres", url, "-key", deploy, "-value", "next\njob", "--", "true")
	waitInspect(t, url, deploy, "1", "1 waiting, first served first:")
	waitInspect(t, url, deploy, "1", `"next\njob"`)
	stdin.Close()
	if code := <-holder.done; code != 3 {
		t.Errorf("the holder's run: exit %d, want its command's 3; output %q", code, out.String())
	}
	if code := <-waiter.done; code != exitOK {
		t.Errorf("the waiter's run: exit %d; output %q", code, wout.String())
	}

	var obs, eout syncBuffer
	startCLI(t, &obs, "elect", "-postgres", url, "-observe", job)
	poll.For(t, "no leader at first", outputOf(&obs, lines(1)))
	_, estdin := startCLI(t, &eout, "elect", "-postgres", url, job, "host-a: deploy", "--", "sh", "-c", "read x")
	got := parseObserved(t, poll.For(t, "a leader", outputOf(&obs, lines(2))))
	if got[1].value != `"host-a: deploy"` {
		t.Errorf("observed %+v, want the leader's value \"host-a: deploy\"", got)
	}
	estdin.Close()
}

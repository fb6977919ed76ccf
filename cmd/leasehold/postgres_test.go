package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend/postgres/pgtest"
)

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
	code, out, errOut := runArgs(t, t.Context(), "run", "-postgres", "postgres://postgres@127.0.0.1:1/x", "-key", "k", "--", "echo", "ran")
	if code != exitFail || out != "" || !strings.HasPrefix(errOut, "leasehold run: postgres 127.0.0.1:1 unreachable: ") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d, nothing run, one line naming the database", code, out, errOut, exitFail)
	}
}

// TestPostgresRunInspectAndElect: run holds a lease on PostgreSQL while its command runs, with its
// default value; inspect shows it and the waiting line; elect -observe sees a leader's value.
func TestPostgresRunInspectAndElect(t *testing.T) {
	url := pgtest.StartServer(t).URL
	var out syncBuffer
	holder, stdin := startCLI(t, &out, "run", "-postgres", url, "-key", "deploy", "--", "sh", "-c", "read x; exit 3")
	waitInspect(t, url, "deploy", "1", "1 holder(s)")
	host, _ := os.Hostname()
	waitInspect(t, url, "deploy", "1", fmt.Sprintf(`"%s pid %d: sh -c 'read x;`, host, holder.pid)) // the table cuts the rest

	var wout syncBuffer
	waiter, _ := startCLI(t, &wout, "run", "-postgres", url, "-key", "deploy", "-value", "next\njob", "--", "true")
	waitInspect(t, url, "deploy", "1", "1 waiting, first served first:")
	waitInspect(t, url, "deploy", "1", `"next\njob"`)
	stdin.Close()
	if code := <-holder.done; code != 3 {
		t.Errorf("the holder's run: exit %d, want its command's 3; output %q", code, out.String())
	}
	if code := <-waiter.done; code != exitOK {
		t.Errorf("the waiter's run: exit %d; output %q", code, wout.String())
	}

	var obs, eout syncBuffer
	startCLI(t, &obs, "elect", "-postgres", url, "-observe", "job")
	untilOutput(t, "no leader at first", &obs, lines(1))
	_, estdin := startCLI(t, &eout, "elect", "-postgres", url, "job", "host-a: deploy", "--", "sh", "-c", "read x")
	got := parseObserved(t, untilOutput(t, "a leader", &obs, lines(2)))
	if got[1].value != `"host-a: deploy"` {
		t.Errorf("observed %+v, want the leader's value \"host-a: deploy\"", got)
	}
	estdin.Close()
}

package redistest

import (
	"strconv"
	"strings"
	"testing"
)

// TestServerWhosePortIsTakenIsNotReady: a server started on a port that another redis-server
// took first exits, and the other one answers PING there: run reports the port taken, so that
// Launch tries another, rather than hand a test someone else's server.
func TestServerWhosePortIsTakenIsNotReady(t *testing.T) {
	first := StartServer(t)
	bin := binary(t, "redis-server")
	_, port, _ := strings.Cut(first.Addr, ":")
	second := &Server{Addr: first.Addr, dir: t.TempDir(),
		args: []string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--logfile", ""}}
	err := second.run(bin)
	if err == nil {
		stop(second.cmd)
		t.Fatalf("a server whose port %s another server holds was taken for ready", port)
	}
	if !strings.Contains(err.Error(), "another redis-server (pid "+strconv.Itoa(first.Pid())+")") {
		t.Fatalf("error %q; want it to name the other server's pid %d", err, first.Pid())
	}
}

package pgtest

import (
	"strings"
	"testing"
)

// TestServerWhosePortIsTakenIsNotReady: a server started on a port another server took first
// exits, while the other one answers there: start reports the port taken, so that Launch tries
// another, rather than hand a test someone else's server.
func TestServerWhosePortIsTakenIsNotReady(t *testing.T) {
	t.Parallel() // a server of its own
	first := StartServer(t)
	second := StartServer(t)
	second.Kill(t)
	second.Port, second.URL = first.Port, first.URL
	err := second.start()
	if err == nil {
		t.Fatalf("a server whose port %d another server holds was taken for ready", first.Port)
	}
	if !strings.Contains(err.Error(), "another server (data directory "+first.data+")") {
		t.Fatalf("error %q; want it to name the other server's data directory %s", err, first.data)
	}
}

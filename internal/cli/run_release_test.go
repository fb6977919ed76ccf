package cli

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend/redistest"
)

// TestRunReleasesAgainWhenTheReleaseReplyIsLost: the command ends, and run's Release of the lease
// gets no reply (the call is held on its way; the client's read times out): run releases once
// more, which frees the key (or, had the first gone through, reports it released), instead of
// leaving the key held by nobody until its TTL (60 s here). The exit status is the command's.
func TestRunReleasesAgainWhenTheReleaseReplyIsLost(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	arrived, deliver := proxy.HoldRequest("_release\r\n") // the FCALL of the release function
	defer deliver()
	code, _, errOut := runArgs(t, t.Context(), "run", "-redis", "redis://"+proxy.Addr+"?read_timeout=300ms",
		"-key", "lost-release", "-ttl", "60s", "--", "sh", "-c", "exit 3")
	select {
	case <-arrived:
	default:
		t.Fatalf("no release was held; run said %q", errOut)
	}
	if code != 3 {
		t.Errorf("exit %d, stderr %q; want 3, the command's", code, errOut)
	}
	if _, iout, _ := runArgs(t, t.Context(), "inspect", "-redis", srv.Addr, "lost-release"); !strings.HasPrefix(iout, "lost-release: 0 holder(s)") {
		t.Errorf("after run exited, its first release held on its way: %q; want the key free; run said %q", iout, errOut)
	}
}

package cli

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/internal/poll"
)

// A signal that ends the wait while the grant's reply is on its way: run exits 130 without
// starting the command, and the lease the store granted is released before run exits, not left
// held until its TTL (-ttl 60s here) runs out. Before the fix the library's background release
// was cut short by the process's exit.
func TestRunInterruptedAsTheGrantIsInFlightReleasesIt(t *testing.T) {
	testenv.SkipShort(t, "delays the grant's reply a second through a proxy")
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	proxy.SetLatency(time.Second) // the grant reaches the server a second before its reply reaches run
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := cli(ctx, "run", "-redis", "redis://"+proxy.Addr, "-key", "inflight", "-ttl", "60s", "--", "sleep", "30")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	poll.For(t, "the server to have granted the lease", func() (string, bool) {
		_, iout, _ := runArgs(t, t.Context(), "inspect", "-redis", srv.Addr, "inflight")
		return iout, strings.HasPrefix(iout, "inflight: 1 holder(s)")
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	proxy.SetLatency(0) // for what run sends from now on
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted {
		t.Fatalf("exit %d, output %q; want %d (interrupted before the command started)", code, out.String(), exitInterrupted)
	}
	code, iout, _ := runArgs(t, t.Context(), "inspect", "-redis", srv.Addr, "inflight")
	if code != 0 || !strings.HasPrefix(iout, "inflight: 0 holder(s)") {
		t.Errorf("once run exited, interrupted as the grant was on its way: %q; want the lease released; run said %q", iout, out.String())
	}
}

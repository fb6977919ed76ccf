package diagnose_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/internal/diagnose"
)

// hangUp returns the address of a loopback listener that closes every connection at once and
// counts them, until the test ends.
func hangUp(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	return l.Addr().String(), &n
}

// TestCallsFailingAtOnceCostOneProbe: many calls failing together at one address are diagnosed
// alike from one probe (two connections: its PING and its SSLRequest), and each error wraps its
// own call's.
func TestCallsFailingAtOnceCostOneProbe(t *testing.T) {
	addr, conns := hangUp(t)
	var d diagnose.Doctor
	ep := diagnose.Endpoint{Network: "tcp", Addr: addr}
	const calls = 20
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = d.Redis(t.Context(), ep, 0, io.EOF) })
	}
	wg.Wait()
	want := "redis " + addr + ": not a Redis server, or one that wants TLS: it closes the connection without a reply"
	for _, err := range errs {
		if err.Error() != want || !errors.Is(err, io.EOF) {
			t.Fatalf("diagnosis: %v\nwant %q, wrapping EOF", err, want)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections for %d diagnoses at once, want 2 (one probe)", n, calls)
	}
}

// TestDiagnosisWithCtxEndedProbesNothing: a call whose ctx has ended gets its own error back, and
// the address is not dialled.
func TestDiagnosisWithCtxEndedProbesNothing(t *testing.T) {
	addr, conns := hangUp(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var d diagnose.Doctor
	if err := d.Redis(ctx, diagnose.Endpoint{Network: "tcp", Addr: addr}, 0, io.EOF); err != io.EOF {
		t.Errorf("diagnosis: %v, want EOF as it is", err)
	}
	if err := d.Postgres(ctx, addr, diagnose.Endpoint{Network: "tcp", Addr: addr}, io.EOF); err != io.EOF {
		t.Errorf("diagnosis: %v, want EOF as it is", err)
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d connections, want none", n)
	}
}

// TestUnauthenticatedProtocolErrorSaysAPasswordIsWanted: the protocol error Redis answers to a
// long command from a connection that has not authenticated reads as a missing password, with
// the hint given.
func TestUnauthenticatedProtocolErrorSaysAPasswordIsWanted(t *testing.T) {
	d := diagnose.Doctor{Hints: diagnose.Hints{Password: "give one"}}
	cause := errors.New("ERR Protocol error: unauthenticated multibulk length")
	err := d.Redis(t.Context(), diagnose.Endpoint{Network: "tcp", Addr: "127.0.0.1:1"}, 0, cause)
	want := "redis 127.0.0.1:1: authentication failed: the server wants a password and none was given (give one): "
	if !strings.HasPrefix(err.Error(), want) || !errors.Is(err, cause) {
		t.Errorf("diagnosis: %v\nwant it to start %q and wrap the server's error", err, want)
	}
}

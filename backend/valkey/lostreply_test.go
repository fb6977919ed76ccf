package valkey_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
)

// fcallsRun returns how many FCALLs the server at addr has run.
func fcallsRun(t *testing.T, addr string) int {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_fcall:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// releaseCutter dials connections that, once armed, are cut when the reply to the next release
// call written on them comes: the server ran the call, and the client reads EOF.
type releaseCutter struct {
	armed atomic.Bool
	cuts  atomic.Int32
}

func (r *releaseCutter) dial(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", dst)
	if err != nil {
		return nil, err
	}
	return &releaseCutConn{Conn: c, r: r}, nil
}

type releaseCutConn struct {
	net.Conn
	r       *releaseCutter
	release atomic.Bool
}

func (c *releaseCutConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("_release\r\n")) && c.r.armed.CompareAndSwap(true, false) {
		c.release.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *releaseCutConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.release.Load() {
		c.r.cuts.Add(1)
		c.Conn.Close()
		return 0, io.EOF
	}
	return n, err
}

// TestReleaseCutAfterItRanIsNotSentAgain: valkey-go sends a Release once (it retries only
// read-only commands) and the Store does not send it again when its connection is cut after the
// server ran it: a second run would find nothing held and report the lease lost. The Store
// reports the lost reply as an error, and the key is free.
func TestReleaseCutAfterItRanIsNotSentAgain(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	r := &releaseCutter{}
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, DialCtxFn: r.dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, err := valkey.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	req := core.AcquireRequest{Key: "cut-release", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
	res, err := s.Acquire(ctx, req)
	if err != nil || !res.Granted {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	before := fcallsRun(t, srv.Addr)
	r.armed.Store(true)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	held, err := s.Release(rctx, core.ReleaseRequest{Key: req.Key, Holder: req.Holder, Fence: res.Fence})
	cancel()
	if r.cuts.Load() != 1 {
		t.Fatalf("%d connections cut, want 1", r.cuts.Load())
	}
	if !held && err == nil {
		t.Fatal("Release whose connection was cut after it ran = false, nil: a release that went through reported as one of nothing (sent again)")
	}
	if err == nil {
		t.Fatalf("Release whose connection was cut = %v, nil; want the lost reply's error", held)
	}
	if ran := fcallsRun(t, srv.Addr) - before; ran != 1 {
		t.Errorf("the server ran %d FCALLs, want 1 (the Release, once)", ran)
	}
	if snap, err := s.Inspect(ctx, req.Key); err != nil || len(snap.Leases) != 0 {
		t.Fatalf("Inspect after the release = %+v, %v; want no lease (the release ran)", snap, err)
	}
}

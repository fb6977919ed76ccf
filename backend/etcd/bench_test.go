package etcd_test

// Leasehold on etcd beside etcd's own concurrency package (concurrency.Mutex and Election), in
// the same run, on the same server: each benchmark function starts a server of its own
// (etcdtest.Start, not the shared one) and runs Leasehold and the peer on it as sub-benchmarks.
// Every contender has a client of its own (separate processes, in effect), made with a gRPC
// interceptor that counts what it sends to etcd: unary calls, and each message sent on a stream
// (watch requests, lease keep-alives), not only a stream's opening.
//
//	cd backend/etcd && go test -run '^$' -bench . -count 1
//
// The machine is noisy: run the compiled binary several times in turn and compare medians, as
// ratios between the sub-benchmarks of one run:
//
//	go test -c -o /tmp/etcdbench . && for i in 1 2 3 4 5; do /tmp/etcdbench -test.run '^$' -test.bench . ; done
//
// Metrics besides ns/op:
//
//	rpcs/op             requests sent to etcd per op, unary calls and stream messages, the
//	                    background ones included (Leasehold's revokes are awaited, by closing
//	                    the Store, before they are counted)
//	bg-rpcs/op          of them, those sent in the background, not on the caller's context:
//	                    Leasehold's LeaseRevoke of a released grant's etcd lease; the sessions'
//	                    keep-alive messages
//	client-cpu-us/op    CPU time of the test process (every client) per op, from /proc
//	server-cpu-us/op    CPU time of the etcd server's process per op, from /proc (Linux only)
//	p50-us, p90-us      handoffs: from the holder's release call to the waiter's grant
//
// The measurements of the idle waiters' traffic and of the round trips of each Store operation
// are tests, run only with LEASEHOLD_MEASURE=1 (they log what they see):
//
//	LEASEHOLD_MEASURE=1 go test -run 'TestIdleWaitersTraffic|TestRoundTripsPerOperation' -v .

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
)

// fgKey marks the contexts of the calls a benchmark or a measurement makes itself, so that the
// counter can tell their requests from those a Store or a Session sends in the background.
type fgKey struct{}

func foreground(ctx context.Context) context.Context { return context.WithValue(ctx, fgKey{}, true) }

func class(ctx context.Context) string {
	if ctx.Value(fgKey{}) != nil {
		return "fg"
	}
	return "bg"
}

// tally counts by "class method what": class fg or bg, method the gRPC method's last element
// (Txn, LeaseGrant, Watch …), what one of call (a unary call), open (a stream opened), send and
// recv (a message on a stream), created (a watch etcd confirmed), progress (a progress
// notification received) and progressreq (a progress request: the benchmarks' own, not counted
// as a request).
type tally map[string]int

// counter counts what one client sends to etcd and receives on streams.
type counter struct {
	mu sync.Mutex
	t  tally
}

func (n *counter) add(key string) {
	n.mu.Lock()
	n.t[key]++
	n.mu.Unlock()
}

func (n *counter) snapshot() tally {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.t)
}

// since returns what was counted after before was taken.
func (n *counter) since(before tally) tally {
	d := n.snapshot()
	for k, v := range before {
		if d[k] -= v; d[k] == 0 {
			delete(d, k)
		}
	}
	return d
}

func (n *counter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	n.add(class(ctx) + " " + path.Base(method) + " call")
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (n *counter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	k := class(ctx) + " " + path.Base(method)
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	n.add(k + " open")
	return &countedStream{ClientStream: cs, n: n, k: k}, nil
}

type countedStream struct {
	grpc.ClientStream
	n *counter
	k string
}

func (s *countedStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err == nil {
		if w, ok := m.(*pb.WatchRequest); ok && w.GetProgressRequest() != nil {
			s.n.add(s.k + " progressreq") // the benchmark's own, asking whether a watch is synced
		} else {
			s.n.add(s.k + " send")
		}
	}
	return err
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		s.n.add(s.k + " recv")
		if w, ok := m.(*pb.WatchResponse); ok {
			switch {
			case w.Created:
				s.n.add(s.k + " created")
			case !w.Canceled && len(w.Events) == 0 && w.CompactRevision == 0:
				s.n.add(s.k + " progress")
			}
		}
	}
	return err
}

// sum adds up the counts whose class is cls ("" for both) and whose what is one of whats.
func (t tally) sum(cls string, whats ...string) int {
	n := 0
	for k, v := range t {
		f := strings.Fields(k)
		if (cls == "" || f[0] == cls) && slices.Contains(whats, f[2]) {
			n += v
		}
	}
	return n
}

// requests is what was sent to etcd: unary calls and stream messages.
func (t tally) requests(cls string) int { return t.sum(cls, "call", "send") }

// String lists the requests by method, "Txn 2, LeaseGrant 1", streams opened after them.
func (t tally) String() string {
	sent, opened := map[string]int{}, map[string]int{}
	for k, v := range t {
		f := strings.Fields(k)
		switch f[2] {
		case "call", "send":
			sent[f[1]] += v
		case "open":
			opened[f[1]] += v
		}
	}
	var parts []string
	for _, m := range slices.Sorted(maps.Keys(sent)) {
		parts = append(parts, fmt.Sprintf("%s %d", m, sent[m]))
	}
	for _, m := range slices.Sorted(maps.Keys(opened)) {
		parts = append(parts, fmt.Sprintf("(%s stream opened: %d)", m, opened[m]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// countedClient returns a client of srv of its own that counts what it sends, connected (one
// Range, before the counter is read by anyone), closed when tb ends.
func countedClient(tb testing.TB, srv *etcdtest.Server) (*clientv3.Client, *counter) {
	tb.Helper()
	n := &counter{t: tally{}}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{srv.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(n.unary), grpc.WithChainStreamInterceptor(n.stream)},
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, "bench-connect"); err != nil {
		tb.Fatal(err)
	}
	return c, n
}

func newBenchStore(tb testing.TB, c *clientv3.Client, opts ...etcd.Option) *etcd.Store {
	tb.Helper()
	s, err := etcd.New(c, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func newSession(tb testing.TB, c *clientv3.Client) *concurrency.Session {
	tb.Helper()
	sess, err := concurrency.NewSession(c) // etcd's default TTL, 60s
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sess.Close() })
	return sess
}

// benchServer is a server of a benchmark's own, with its process id when it can be found (for
// its CPU time).
type benchServer struct {
	*etcdtest.Server
	pid int // 0: unknown
}

func startServer(tb testing.TB) benchServer {
	tb.Helper()
	before := children()
	srv := etcdtest.Start(tb)
	var fresh []int
	for pid := range children() {
		if !before[pid] {
			fresh = append(fresh, pid)
		}
	}
	bs := benchServer{Server: srv}
	if len(fresh) == 1 {
		bs.pid = fresh[0]
	}
	return bs
}

// children returns the ids of this process's child processes, from /proc (none elsewhere).
func children() map[int]bool {
	out := map[int]bool{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	me := os.Getpid()
	for _, d := range dirs {
		f, ok := statFields(d + "/stat")
		if ok && len(f) > 1 && f[1] == strconv.Itoa(me) {
			pid, _ := strconv.Atoi(filepath.Base(d))
			out[pid] = true
		}
	}
	return out
}

// statFields returns the fields of a /proc/PID/stat after the command's name: state, ppid, …
func statFields(file string) ([]string, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(b[i+1:])), true
}

// cpuTime returns the CPU time (user and system) process pid has used, and whether it could tell.
// /proc counts it in clock ticks, 100 a second on every Linux ABI.
func cpuTime(pid int) (time.Duration, bool) {
	f, ok := statFields(fmt.Sprintf("/proc/%d/stat", pid))
	if !ok || len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+s) * 10 * time.Millisecond, true
}

// mark is where a measured stretch began: what the clients had sent, and the CPU times.
type mark struct {
	ns             []*counter
	before         []tally
	client, server time.Duration
	srvPID         int
}

func markNow(srv benchServer, ns ...*counter) mark {
	m := mark{ns: ns, srvPID: srv.pid}
	for _, n := range ns {
		m.before = append(m.before, n.snapshot())
	}
	m.client, _ = cpuTime(os.Getpid())
	if srv.pid != 0 {
		m.server, _ = cpuTime(srv.pid)
	}
	return m
}

// report reports per op what was sent since m, and the CPU times.
func (m mark) report(b *testing.B, ops int) {
	var total, bg int
	for i, n := range m.ns {
		d := n.since(m.before[i])
		total += d.requests("")
		bg += d.requests("bg")
	}
	per := func(x float64) float64 { return x / float64(ops) }
	b.ReportMetric(per(float64(total)), "rpcs/op")
	b.ReportMetric(per(float64(bg)), "bg-rpcs/op")
	if c, ok := cpuTime(os.Getpid()); ok {
		b.ReportMetric(per(float64((c - m.client).Microseconds())), "client-cpu-us/op")
	}
	if m.srvPID != 0 {
		if s, ok := cpuTime(m.srvPID); ok {
			b.ReportMetric(per(float64((s - m.server).Microseconds())), "server-cpu-us/op")
		}
	}
}

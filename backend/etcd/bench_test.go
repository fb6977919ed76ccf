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
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
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

// BenchmarkUncontendedPair is one caller taking and releasing a lock nobody else wants: a
// Leasehold Mutex (Acquire, Release; default options, whose refresh at a third of the 10s TTL
// never comes during a pair) beside a concurrency.Mutex (Lock, Unlock) on a Session made once,
// as its users keep one.
func BenchmarkUncontendedPair(b *testing.B) {
	srv := startServer(b)
	b.Run("leasehold", func(b *testing.B) {
		c, n := countedClient(b, srv.Server)
		s := newBenchStore(b, c)
		m, err := primitives.NewMutex(s, "pair")
		if err != nil {
			b.Fatal(err)
		}
		ctx := foreground(context.Background())
		at := markNow(srv, n)
		for b.Loop() {
			l, err := m.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		s.Close() // waits for the revokes still in flight, so that they are counted
		at.report(b, b.N)
	})
	b.Run("etcd-concurrency", func(b *testing.B) {
		c, n := countedClient(b, srv.Server)
		mu := concurrency.NewMutex(newSession(b, c), "pair-etcd")
		ctx := foreground(context.Background())
		at := markNow(srv, n)
		for b.Loop() {
			if err := mu.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := mu.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		at.report(b, b.N)
	})
}

// contender is one party to handoffs: lock waits until it holds, and returns its unlock;
// progress asks etcd for a progress notification on the gRPC stream of the contender's watches
// (etcd answers only once every watch on it is synced).
type contender struct {
	n        *counter
	lock     func(ctx context.Context) (unlock func(context.Context) error, err error)
	progress func()
}

// handoffs runs handoffs between a and c, in turns: one holds, the other asks and waits, then the
// holder releases. p50-us and p90-us are the handoffs, from the holder's release call to the
// waiter's grant (the return of its lock); ns/op is a whole turn, the waiter's arrival included.
//
// The release comes once the waiter's client has a watch etcd confirmed; when settled is set,
// only once etcd also says the watch is synced (a progress notification, asked for with a write
// to another key by a client of the benchmark's own). Those requests are not counted in
// rpcs/op, but their CPU is in the CPU columns: of settled handoffs, read only the latencies and
// rpcs/op. A watch that starts from a revision already
// written (both libraries start theirs from the revision of a read or write the wait made) is
// not synced at once: etcd catches such watches up every 100ms (watchResyncPeriod), and a
// release before then reaches the waiter only then. Settled handoffs are those of a waiter that
// has waited for more than that; the others, of a release that follows the waiter's arrival at
// once.
func handoffs(b *testing.B, srv benchServer, settled bool, a, c contender) {
	ctx := foreground(context.Background())
	unlock, err := a.lock(ctx)
	if err != nil {
		b.Fatal(err)
	}
	type result struct {
		unlock func(context.Context) error
		at     time.Time
		err    error
	}
	var lat []time.Duration
	bump := srv.Client(b) // not counted: its writes are the benchmark's own
	at := markNow(srv, a.n, c.n)
	turns := [2]contender{c, a}
	for b.Loop() {
		w := turns[len(lat)%2]
		before := w.n.snapshot()
		done := make(chan result, 1)
		go func() {
			u, err := w.lock(ctx)
			done <- result{u, time.Now(), err}
		}()
		poll.Until(b, "the waiter watching", func() bool { return w.n.since(before).sum("", "created") > 0 })
		if settled {
			poll.Until(b, "the waiter's watch synced", func() bool {
				if w.n.since(before).sum("", "progress") > 0 {
					return true
				}
				// etcd answers only when the server's revision has reached the start of every
				// watch on the stream: a watch that starts after the latest write (synced at
				// once) needs a write elsewhere first.
				if _, err := bump.Put(ctx, "bench-bump", ""); err != nil {
					b.Fatal(err)
				}
				w.progress()
				return false
			})
		}
		start := time.Now()
		if err := unlock(ctx); err != nil {
			b.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			b.Fatal(r.err)
		}
		lat = append(lat, r.at.Sub(start))
		unlock = r.unlock
	}
	if err := unlock(ctx); err != nil {
		b.Fatal(err)
	}
	at.report(b, len(lat))
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(q(0.5), "p50-us")
	b.ReportMetric(q(0.9), "p90-us")
}

// leaseholdContender is a contender with a Store and a client of its own; acquire makes its
// primitive on the Store.
func leaseholdContender(b *testing.B, srv benchServer, acquire func(*etcd.Store) func(context.Context) (core.Lease, error)) contender {
	c, n := countedClient(b, srv.Server)
	take := acquire(newBenchStore(b, c))
	return contender{n: n,
		lock: func(ctx context.Context) (func(context.Context) error, error) {
			l, err := take(ctx)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		},
		// The Store's watches ask etcd to require a leader: their stream is that of such a
		// context.
		progress: func() { c.RequestProgress(clientv3.WithRequireLeader(context.Background())) },
	}
}

// etcdContender is a contender with a Session and a client of its own; lock locks the
// concurrency package's primitive, made on the Session, and returns its unlock.
func etcdContender(b *testing.B, srv benchServer, lock func(*concurrency.Session) func(context.Context) (func(context.Context) error, error)) contender {
	c, n := countedClient(b, srv.Server)
	return contender{n: n, lock: lock(newSession(b, c)),
		progress: func() { c.RequestProgress(context.Background()) }, // its watches' contexts carry no metadata
	}
}

func leaseholdMutex(b *testing.B, key string) func(*etcd.Store) func(context.Context) (core.Lease, error) {
	return func(s *etcd.Store) func(context.Context) (core.Lease, error) {
		m, err := primitives.NewMutex(s, key, primitives.WithAcquireTimeout(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context) (core.Lease, error) { return m.Acquire(ctx) }
	}
}

func etcdMutex(key string) func(*concurrency.Session) func(context.Context) (func(context.Context) error, error) {
	return func(sess *concurrency.Session) func(context.Context) (func(context.Context) error, error) {
		mu := concurrency.NewMutex(sess, key)
		return func(ctx context.Context) (func(context.Context) error, error) { return mu.Unlock, mu.Lock(ctx) }
	}
}

// BenchmarkHandoff is a Mutex changing hands between two contenders, each with a client of its
// own, once the waiter's watch is synced: a Leasehold Mutex (the line grants the waiter on the
// release) and a concurrency.Mutex (the waiter watches its predecessor's key).
func BenchmarkHandoff(b *testing.B) {
	srv := startServer(b)
	b.Run("leasehold", func(b *testing.B) {
		handoffs(b, srv, true, leaseholdContender(b, srv, leaseholdMutex(b, "handoff")), leaseholdContender(b, srv, leaseholdMutex(b, "handoff")))
	})
	b.Run("etcd-concurrency", func(b *testing.B) {
		handoffs(b, srv, true, etcdContender(b, srv, etcdMutex("handoff-etcd")), etcdContender(b, srv, etcdMutex("handoff-etcd")))
	})
}

// BenchmarkHandoffOnArrival is BenchmarkHandoff with the release as soon as the waiter's watch
// is confirmed, before etcd has synced it: what a waiter that arrives just before a release sees.
func BenchmarkHandoffOnArrival(b *testing.B) {
	srv := startServer(b)
	b.Run("leasehold", func(b *testing.B) {
		handoffs(b, srv, false, leaseholdContender(b, srv, leaseholdMutex(b, "handoff")), leaseholdContender(b, srv, leaseholdMutex(b, "handoff")))
	})
	b.Run("etcd-concurrency", func(b *testing.B) {
		handoffs(b, srv, false, etcdContender(b, srv, etcdMutex("handoff-etcd")), etcdContender(b, srv, etcdMutex("handoff-etcd")))
	})
}

// BenchmarkElectionHandoff is leadership passing between two candidates, once the waiting
// candidate's watch is synced: the leader resigns while the other campaigns. Leasehold's Election
// (Campaign, then the lease's Release) beside concurrency.Election (Campaign, Resign), each
// candidate with a client of its own.
func BenchmarkElectionHandoff(b *testing.B) {
	srv := startServer(b)
	b.Run("leasehold", func(b *testing.B) {
		election := func(s *etcd.Store) func(context.Context) (core.Lease, error) {
			el, err := primitives.NewElection(s, "election")
			if err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context) (core.Lease, error) { return el.Campaign(ctx, "candidate") }
		}
		handoffs(b, srv, true, leaseholdContender(b, srv, election), leaseholdContender(b, srv, election))
	})
	b.Run("etcd-concurrency", func(b *testing.B) {
		election := func(sess *concurrency.Session) func(context.Context) (func(context.Context) error, error) {
			el := concurrency.NewElection(sess, "election-etcd")
			return func(ctx context.Context) (func(context.Context) error, error) {
				return el.Resign, el.Campaign(ctx, "candidate")
			}
		}
		handoffs(b, srv, true, etcdContender(b, srv, election), etcdContender(b, srv, election))
	})
}

func measuring(t *testing.T) {
	if os.Getenv("LEASEHOLD_MEASURE") != "1" {
		t.Skip("a measurement, not a check: LEASEHOLD_MEASURE=1 runs it")
	}
}

// TestIdleWaitersTraffic measures what waiters blocked on a held lock send to etcd while they
// wait: 50 waiters, each with a client of its own, for a window of 3s (LEASEHOLD_MEASURE_WINDOW
// sets another), counted once every waiter's client has its watch. Leasehold's waiters (one
// Store each) and concurrency.Mutex's (one Session each) wait on the same server, one library
// after the other. Each sends its session lease's keep-alive, once a third of the session's TTL
// (Leasehold's Store: 10s; etcd's Session: 60s), so a window shorter than that sees some of them
// or none. Leasehold's waiters also try again when the store said the holder's lease would
// expire (its RetryAfter, up to the holder's 10s TTL), which the holder's refreshes put off: a
// window of less than 10s may see none of those tries.
func TestIdleWaitersTraffic(t *testing.T) {
	measuring(t)
	const waiters = 50
	window := 3 * time.Second
	if w := os.Getenv("LEASEHOLD_MEASURE_WINDOW"); w != "" {
		var err error
		if window, err = time.ParseDuration(w); err != nil {
			t.Fatal(err)
		}
	}
	srv := startServer(t)
	measure := func(t *testing.T, name string, hold func(ctx context.Context) func(), wait func(ctx context.Context, i int) (*counter, func(context.Context) error)) {
		ctx, cancel := context.WithCancel(foreground(context.Background()))
		defer cancel()
		release := hold(ctx)
		ns := make([]*counter, waiters)
		var wg sync.WaitGroup
		errs := make(chan error, waiters)
		for i := range waiters {
			n, lock := wait(ctx, i)
			ns[i] = n
			wg.Go(func() {
				if err := lock(ctx); err != nil && ctx.Err() == nil {
					errs <- err
				}
			})
		}
		poll.Until(t, "every waiter watching", func() bool {
			for _, n := range ns {
				if n.snapshot().sum("", "created") == 0 {
					return false
				}
			}
			return true
		})
		at := markNow(srv, ns...)
		time.Sleep(window) // the measurement's window, not a wait for a condition
		var d []tally
		total := tally{}
		for i, n := range ns {
			d = append(d, n.since(at.before[i]))
			for k, v := range d[i] {
				total[k] += v
			}
		}
		client, _ := cpuTime(os.Getpid())
		server, _ := cpuTime(srv.pid)
		recv := map[string]int{}
		for k, v := range total {
			if f := strings.Fields(k); f[2] == "recv" {
				recv[f[1]] += v
			}
		}
		t.Logf("%s: %d waiters for %v sent %d requests (%.3f/s per waiter): %v; received stream messages %v; CPU in the window: clients %v, server %v",
			name, waiters, window, total.requests(""), float64(total.requests(""))/window.Seconds()/waiters, total,
			recv, client-at.client, server-at.server)
		cancel()
		wg.Wait()
		release()
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}
	t.Run("leasehold", func(t *testing.T) {
		mutex := func(c *clientv3.Client) *primitives.Mutex {
			m, err := primitives.NewMutex(newBenchStore(t, c), "idle", primitives.WithAcquireTimeout(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		measure(t, "leasehold", func(ctx context.Context) func() {
			c, n := countedClient(t, srv.Server)
			l, err := mutex(c).Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			at := n.snapshot()
			return func() {
				t.Logf("leasehold: the holder sent %v while they waited (its refresh, every third of its 10s TTL)", n.since(at))
				l.Release(context.Background())
			}
		}, func(ctx context.Context, i int) (*counter, func(context.Context) error) {
			c, n := countedClient(t, srv.Server)
			m := mutex(c)
			return n, func(ctx context.Context) error {
				l, err := m.Acquire(ctx)
				if err == nil {
					err = fmt.Errorf("waiter %d was granted the held lock", i)
					l.Release(ctx)
				}
				return err
			}
		})
	})
	t.Run("etcd-concurrency", func(t *testing.T) {
		measure(t, "etcd-concurrency", func(ctx context.Context) func() {
			c, _ := countedClient(t, srv.Server)
			mu := concurrency.NewMutex(newSession(t, c), "idle-etcd")
			if err := mu.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			return func() { mu.Unlock(context.Background()) }
		}, func(ctx context.Context, i int) (*counter, func(context.Context) error) {
			c, n := countedClient(t, srv.Server)
			mu := concurrency.NewMutex(newSession(t, c), "idle-etcd")
			return n, func(ctx context.Context) error {
				err := mu.Lock(ctx)
				if err == nil {
					err = fmt.Errorf("waiter %d was granted the held lock", i)
					mu.Unlock(ctx)
				}
				return err
			}
		})
	})
}

// TestRoundTripsPerOperation measures the requests each Store operation sends to etcd, those
// its caller waits for and those sent in the background after it returns (awaited by closing
// the Store, whose own revoke of its session lease is not counted), and logs them as a table.
// Each operation runs on a Store of its own, on a client that counts; what sets the key up runs
// on another client.
func TestRoundTripsPerOperation(t *testing.T) {
	measuring(t)
	srv := startServer(t)
	ca, na := countedClient(t, srv.Server) // the measured operations
	cb, _ := countedClient(t, srv.Server)  // the set-up
	ctx := foreground(context.Background())
	const ttl = 10 * time.Second
	req := func(key, holder string, wait time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: ttl, Wait: wait, Unshared: true}
	}
	other := newBenchStore(t, cb)
	hold := func(key, holder string) uint64 {
		t.Helper()
		res, err := other.Acquire(ctx, req(key, holder, 0))
		if err != nil || !res.Granted {
			t.Fatalf("set-up acquire of %s: %+v, %v", key, res, err)
		}
		return res.Fence
	}
	type row struct {
		op     string
		fg, bg tally
	}
	var rows []row
	// measure runs op on s, closes s, and records what was sent; session says whether s has a
	// session lease by then, whose revoke by Close is not the operation's.
	measure := func(name string, s *etcd.Store, session bool, op func() error) {
		t.Helper()
		before := na.snapshot()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		during := na.since(before)
		s.Close()
		after := na.since(before)
		fg, bg := tally{}, tally{}
		for k, v := range after {
			if strings.HasPrefix(k, "fg ") {
				fg[k] = during[k]
			} else if !strings.Contains(k, " Watch ") { // Close ends the Store's watches
				bg[k] = v
			}
		}
		if session {
			if bg["bg LeaseRevoke call"]--; bg["bg LeaseRevoke call"] == 0 {
				delete(bg, "bg LeaseRevoke call")
			}
		}
		rows = append(rows, row{name, fg, bg})
	}
	acquire := func(s *etcd.Store, r core.AcquireRequest, granted bool) func() error {
		return func() error {
			res, err := s.Acquire(ctx, r)
			if err == nil && res.Granted != granted {
				err = fmt.Errorf("granted %v, want %v", res.Granted, granted)
			}
			return err
		}
	}

	s := newBenchStore(t, ca)
	measure("Acquire, the key free", s, false, acquire(s, req("free", "h1", 0), true))
	hold("held", "h0")
	s = newBenchStore(t, ca)
	measure("Acquire refused, no wait", s, false, acquire(s, req("held", "h2", 0), false))
	s = newBenchStore(t, ca)
	measure("Acquire refused with a wait, the Store's first (grants its session)", s, true, acquire(s, req("held", "h3", time.Minute), false))

	// A waiter's Store W with a session already: its first wait is set-up.
	w := newBenchStore(t, ca)
	if _, err := w.Acquire(ctx, req("held", "hw", time.Minute)); err != nil {
		t.Fatal(err)
	}
	line := "line"
	lineFence := hold(line, "hl")
	before := na.snapshot()
	res, err := w.Acquire(ctx, req(line, "hw", time.Minute))
	if err != nil || res.Granted {
		t.Fatalf("a wait on the held key: %+v, %v", res, err)
	}
	fg := fgOnly(na.since(before))
	rows = append(rows, row{op: "Acquire refused with a wait, a Store with a session", fg: fg, bg: bgOnly(na.since(before))})
	before = na.snapshot()
	waiter, err := w.Register(ctx, req(line, "hw", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	poll.Until(t, "the waiter's watch", func() bool { return na.since(before).sum("", "created") > 0 })
	watch := na.since(before)
	rows = append(rows, row{op: "Register (Notifier), after a refusal through the Store", fg: fgOnly(watch), bg: watch})

	s = newBenchStore(t, ca)
	measure("Release, a waiter in line (grants it)", s, false, func() error {
		ok, err := s.Release(ctx, core.ReleaseRequest{Key: line, Holder: "hl", Fence: lineFence})
		if err == nil && !ok {
			err = fmt.Errorf("not held")
		}
		return err
	})
	select {
	case <-waiter.C():
	case <-time.After(poll.Timeout):
		t.Fatal("the waiter was not woken by the grant of the line")
	}
	measure("Acquire, the grant the line made (the woken waiter's try)", w, true, acquire(w, req(line, "hw", time.Minute), true))

	relFence := hold("release", "hr")
	s = newBenchStore(t, ca)
	measure("Release, nobody in line", s, false, func() error {
		_, err := s.Release(ctx, core.ReleaseRequest{Key: "release", Holder: "hr", Fence: relFence})
		return err
	})
	hold("extend", "he")
	s = newBenchStore(t, ca)
	measure("Extend, the same TTL", s, false, func() error {
		_, err := s.Extend(ctx, core.ExtendRequest{Key: "extend", Holder: "he", TTL: ttl})
		return err
	})
	s = newBenchStore(t, ca)
	measure("Extend, another TTL", s, false, func() error {
		_, err := s.Extend(ctx, core.ExtendRequest{Key: "extend", Holder: "he", TTL: 2 * ttl})
		return err
	})
	s = newBenchStore(t, ca)
	measure("Inspect, one lease", s, false, func() error {
		_, err := s.Inspect(ctx, "extend")
		return err
	})

	// etcd's concurrency.Mutex, for comparison: a Session, Lock of a free key, Unlock, and
	// Lock of a held key (until it watches, then after the release).
	cc, nc := countedClient(t, srv.Server)
	step := func(name string, op func() error) {
		t.Helper()
		before := nc.snapshot()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d := nc.since(before)
		rows = append(rows, row{name, fgOnly(d), bgOnly(d)})
	}
	var sess *concurrency.Session
	step("concurrency.NewSession", func() error {
		var err error
		sess, err = concurrency.NewSession(cc, concurrency.WithContext(ctx))
		return err
	})
	defer sess.Close()
	mu := concurrency.NewMutex(sess, "etcd-mutex")
	step("concurrency.Mutex Lock, the key free", func() error { return mu.Lock(ctx) })
	step("concurrency.Mutex Unlock", func() error { return mu.Unlock(ctx) })
	holder := newSession(t, cb)
	hmu := concurrency.NewMutex(holder, "etcd-mutex")
	if err := hmu.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	before = nc.snapshot()
	locked := make(chan error, 1)
	go func() { locked <- mu.Lock(ctx) }()
	poll.Until(t, "the concurrency.Mutex waiter watching", func() bool { return nc.since(before).sum("", "created") > 0 })
	d := nc.since(before)
	rows = append(rows, row{"concurrency.Mutex Lock, the key held: until it watches", fgOnly(d), bgOnly(d)})
	if err := hmu.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	d = nc.since(before)
	rows = append(rows, row{"concurrency.Mutex Lock, the key held: in all, after the release", fgOnly(d), bgOnly(d)})
	mu.Unlock(ctx)

	var b strings.Builder
	b.WriteString("\n| Operation | Requests the caller waits for | In the background |\n|:---|:---|:---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d: %v | %v |\n", r.op, r.fg.requests(""), r.fg, r.bg)
	}
	t.Log(b.String())
}

// bgOnly is the background part of t, watches aside.
func bgOnly(t tally) tally {
	out := tally{}
	for k, v := range t {
		if strings.HasPrefix(k, "bg ") && !strings.Contains(k, " Watch ") {
			out[k] = v
		}
	}
	return out
}

// fgOnly is the foreground part of t.
func fgOnly(t tally) tally {
	out := tally{}
	for k, v := range t {
		if strings.HasPrefix(k, "fg ") {
			out[k] = v
		}
	}
	return out
}

// BenchmarkEtcdCalls is the cost of each kind of etcd request the Store and the peers send, one
// at a time on one client: what the pairs and handoffs above are made of. Txn is a write of one
// key (as Leasehold's grant and concurrency.Mutex's Lock); DeleteRange, Unlock's write;
// LeaseGrant and LeaseRevoke, the etcd lease of each Leasehold grant; KeepAliveOnce, a renewal of
// a lease (not a consensus write); Range, a linearizable read; LeaseTimeToLive, a question
// about a lease (Inspect's, and a refusal's RetryAfter).
func BenchmarkEtcdCalls(b *testing.B) {
	srv := startServer(b)
	ctx := foreground(context.Background())
	lease := func(b *testing.B, c *clientv3.Client) clientv3.LeaseID {
		g, err := c.Grant(ctx, 60)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Revoke(context.Background(), g.ID) })
		return g.ID
	}
	calls := []struct {
		name string
		call func(b *testing.B, c *clientv3.Client) func() error
	}{
		{"Txn", func(b *testing.B, c *clientv3.Client) func() error {
			id := lease(b, c)
			return func() error {
				_, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Version("calls/k"), ">", -1)).
					Then(clientv3.OpPut("calls/k", "v", clientv3.WithLease(id))).Commit()
				return err
			}
		}},
		{"DeleteRange", func(b *testing.B, c *clientv3.Client) func() error {
			return func() error { _, err := c.Delete(ctx, "calls/k"); return err }
		}},
		{"LeaseGrant+LeaseRevoke", func(b *testing.B, c *clientv3.Client) func() error {
			return func() error {
				g, err := c.Grant(ctx, 10)
				if err == nil {
					_, err = c.Revoke(ctx, g.ID)
				}
				return err
			}
		}},
		{"KeepAliveOnce", func(b *testing.B, c *clientv3.Client) func() error {
			id := lease(b, c)
			return func() error { _, err := c.KeepAliveOnce(ctx, id); return err }
		}},
		{"Range", func(b *testing.B, c *clientv3.Client) func() error {
			return func() error { _, err := c.Get(ctx, "calls/", clientv3.WithPrefix()); return err }
		}},
		{"LeaseTimeToLive", func(b *testing.B, c *clientv3.Client) func() error {
			id := lease(b, c)
			return func() error { _, err := c.TimeToLive(ctx, id); return err }
		}},
		// Leasehold's uncontended pair replayed from its requests: a lease, a Txn that grants
		// on it, a Txn that releases, the lease revoked in the background.
		{"leasehold-pair-replayed", func(b *testing.B, c *clientv3.Client) func() error {
			var wg sync.WaitGroup
			b.Cleanup(wg.Wait)
			return func() error {
				g, err := c.Grant(ctx, 10)
				if err != nil {
					return err
				}
				if err := replayPair(ctx, c, g.ID); err != nil {
					return err
				}
				wg.Go(func() { c.Revoke(context.Background(), g.ID) })
				return nil
			}
		}},
		// The same with one lease kept and renewed (KeepAliveOnce, not a consensus write) for
		// each grant, in place of a new lease and its revoke: what a Store that kept a released
		// grant's etcd lease for its next grant of the same TTL would send.
		{"leasehold-pair-lease-renewed", func(b *testing.B, c *clientv3.Client) func() error {
			id := lease(b, c)
			return func() error {
				if _, err := c.KeepAliveOnce(ctx, id); err != nil {
					return err
				}
				return replayPair(ctx, c, id)
			}
		}},
	}
	for _, k := range calls {
		b.Run(k.name, func(b *testing.B) {
			c, n := countedClient(b, srv.Server)
			call := k.call(b, c)
			at := markNow(srv, n)
			for b.Loop() {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
			at.report(b, b.N)
		})
	}
}

// replayPair sends the two transactions of Leasehold's uncontended pair, as the Store writes
// them: the grant on lease id, then the release.
func replayPair(ctx context.Context, c *clientv3.Client, id clientv3.LeaseID) error {
	const base = "replay/k/"
	t, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Version(base).WithPrefix(), "=", 0)).
		Then(clientv3.OpPut(base+"l/h", "v", clientv3.WithLease(id)), clientv3.OpDelete(base+"d/h"), clientv3.OpDelete(base+"w/h")).
		Else(clientv3.OpGet(base, clientv3.WithPrefix())).Commit()
	if err != nil {
		return err
	}
	if !t.Succeeded {
		return fmt.Errorf("replayed grant refused")
	}
	r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(base+"l/h"), "=", t.Header.Revision), clientv3.Compare(clientv3.Version(base+"w/").WithPrefix(), "=", 0)).
		Then(clientv3.OpDelete(base+"l/h", clientv3.WithPrevKV()), clientv3.OpDelete(base+"d/h", clientv3.WithPrevKV())).
		Else(clientv3.OpGet(base, clientv3.WithPrefix())).Commit()
	if err == nil && !r.Succeeded {
		err = fmt.Errorf("replayed release refused")
	}
	return err
}

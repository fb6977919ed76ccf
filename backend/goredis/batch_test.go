package goredis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// gateHook holds every single FCALL until the gate opens, and every pipeline of FCALLs until
// pipes opens (when not nil), and records the size of each such pipeline.
type gateHook struct {
	gate  chan struct{}
	pipes chan struct{}

	mu        sync.Mutex
	held      int
	pipelines []int
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "fcall") {
			h.mu.Lock()
			h.held++
			h.mu.Unlock()
			<-h.gate
		}
		return next(ctx, cmd)
	}
}

func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if strings.EqualFold(c.Name(), "fcall") {
				n++
			}
		}
		if n > 0 { // go-redis sends a new connection's handshake as a pipeline too
			h.mu.Lock()
			h.pipelines = append(h.pipelines, n)
			h.mu.Unlock()
			if h.pipes != nil {
				<-h.pipes
			}
		}
		return next(ctx, cmds)
	}
}

func (h *gateHook) heldCalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

func (h *gateHook) sizes() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.pipelines...)
}

// gatedStore returns a Store over a fresh client of srv whose single FCALLs wait for h's gate,
// with the library already loaded.
func gatedStore(t *testing.T, srv *redistest.Server, h *gateHook) *goredis.Store {
	t.Helper()
	return gatedStoreWith(t, srv, h, redis.Options{})
}

// gatedStoreWith is gatedStore over a client with options opt.
func gatedStoreWith(t *testing.T, srv *redistest.Server, h *gateHook, opt redis.Options) *goredis.Store {
	t.Helper()
	opt.Addr = srv.Addr
	c := redis.NewClient(&opt)
	t.Cleanup(func() { c.Close() })
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// Load the library (and warm the pool) before the gate goes up.
	if _, err := s.Inspect(context.Background(), "warm"); err != nil {
		t.Fatal(err)
	}
	c.AddHook(h)
	return s
}

// plainStore returns a Store over a fresh client of srv, with no hook.
func plainStore(t *testing.T, srv *redistest.Server) *goredis.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func acquireReq(key, holder string) core.AcquireRequest {
	return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute}
}

// TestCallsMadeWhileTwoAreOutGoTogether: while two calls are out, the calls of other callers
// queue, and go as one pipeline when a send ends; each caller gets its own reply.
func TestCallsMadeWhileTwoAreOutGoTogether(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	h := &gateHook{gate: make(chan struct{})}
	s := gatedStore(t, srv, h)
	ctx := context.Background()

	answers := acquiresQueuedBehindTwo(t, s, h, 6)
	close(h.gate)
	for range 8 {
		a := <-answers
		if a.err != nil || !a.res.Granted || a.res.Fence == 0 {
			t.Fatalf("acquire %s: %+v, %v; want granted with a fence", a.key, a.res, a.err)
		}
	}
	sizes := h.sizes()
	total := 0
	for _, n := range sizes {
		total += n
	}
	if total != 6 || len(sizes) > 2 {
		t.Fatalf("pipelines of %v calls; want the six queued calls in one or two pipelines", sizes)
	}
	for i := range 6 {
		snap, err := s.Inspect(ctx, fmt.Sprint("queued-", i))
		if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != fmt.Sprint("h-queued-", i) {
			t.Fatalf("queued-%d: %+v, %v; want its holder's lease", i, snap, err)
		}
	}
}

// TestClientWithoutTimeoutsSendsEveryCallAlone: over a client with no read or write timeout a
// pipeline could wait forever on a server that never answers, holding up the calls behind it: such
// a client's calls are never queued.
func TestClientWithoutTimeoutsSendsEveryCallAlone(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: -1, WriteTimeout: -1})
	defer c.Close()
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := &gateHook{gate: make(chan struct{})}
	if _, err := s.Inspect(context.Background(), "warm"); err != nil {
		t.Fatal(err)
	}
	c.AddHook(h)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			if _, err := s.Acquire(context.Background(), acquireReq(fmt.Sprint("k", i), "h")); err != nil {
				t.Error(err)
			}
		})
	}
	poll.Until(t, "four calls held at the gate", func() bool { return h.heldCalls() == 4 })
	close(h.gate)
	wg.Wait()
	if sizes := h.sizes(); len(sizes) != 0 {
		t.Fatalf("pipelines of %v calls; want none", sizes)
	}
}

// TestQueuedCallsOnAClusterGoToTheirKeysNodes: on a Cluster, a pipeline of queued calls on keys
// of every node takes each call to its key's node: every caller is granted, and the lease is
// where a call alone finds it.
func TestQueuedCallsOnAClusterGoToTheirKeysNodes(t *testing.T) {
	testenv.SkipShort(t, "starts a Redis Cluster")
	t.Parallel()
	addrs := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { c.Close() })
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	for i := range 8 { // the library on every node, and the client's connections to each
		if _, err := s.Inspect(ctx, fmt.Sprint("warm-", i)); err != nil {
			t.Fatal(err)
		}
	}
	h := &gateHook{gate: make(chan struct{})}
	c.AddHook(h)
	const queued = 16 // keys in every node's slots, most likely
	answers := acquiresQueuedBehindTwo(t, s, h, queued)
	close(h.gate)
	for range queued + 2 {
		a := <-answers
		if a.err != nil || !a.res.Granted || a.res.Fence == 0 {
			t.Fatalf("acquire %s: %+v, %v; want granted with a fence", a.key, a.res, a.err)
		}
	}
	if sizes := h.sizes(); len(sizes) == 0 {
		t.Fatal("no pipeline: the queued calls went alone")
	}
	for i := range queued {
		key := fmt.Sprint("queued-", i)
		snap, err := s.Inspect(ctx, key)
		if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "h-"+key {
			t.Fatalf("%s: %+v, %v; want its holder's lease", key, snap, err)
		}
		if res, err := s.Acquire(ctx, acquireReq(key, "other")); err != nil || res.Granted {
			t.Fatalf("%s: another holder's acquire: %+v, %v; want refused", key, res, err)
		}
	}
}

// TestQueuedCallsOverAPartitionEndByTheClientsTimeouts: while the server is unreachable, the
// calls alone and the pipeline of those queued behind them end with errors by the client's read
// and write timeouts (no caller, and no pipeline goroutine, waits for ever: see TestMain's leak
// check); once it is back, the Store's calls go through again.
func TestQueuedCallsOverAPartitionEndByTheClientsTimeouts(t *testing.T) {
	testenv.SkipShort(t, "waits for the client's timeouts")
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, ReadTimeout: 300 * time.Millisecond,
		WriteTimeout: 300 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if _, err := s.Inspect(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	h := &gateHook{gate: make(chan struct{})}
	close(h.gate) // it only records the pipelines
	c.AddHook(h)
	proxy.Hold(true)
	const n = 10
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := s.Acquire(ctx, acquireReq(fmt.Sprint("partitioned-", i), "h"))
			errs <- err
		}()
	}
	for range n {
		err := poll.For(t, "every call to end by the client's timeouts", func() (error, bool) {
			select {
			case err := <-errs:
				return err, true
			default:
				return nil, false
			}
		})
		if err == nil {
			t.Error("an acquire through a held partition succeeded")
		}
	}
	if len(h.sizes()) == 0 {
		t.Error("no pipeline was sent: the calls did not queue behind the two held ones")
	}
	proxy.Cut()
	proxy.Hold(false)
	res := poll.For(t, "an acquire to go through once the server is back", func() (core.AcquireResult, bool) {
		res, err := s.Acquire(ctx, acquireReq("after", "h"))
		return res, err == nil
	})
	if !res.Granted {
		t.Fatalf("acquire after the partition: %+v; want granted", res)
	}
}

// TestBatchedCallsKeepExclusionAndFences: sixteen workers share one Store, so that their calls
// queue and go in pipelines, and take turns on two keys with Mutexes (quick acquires and
// releases, waits in the line, grants taken from messages): inside each turn the server holds
// exactly the worker's lease at the worker's fence, the fences of each key rise strictly, no two
// workers are inside one key at once, and nothing is left once all are done.
func TestBatchedCallsKeepExclusionAndFences(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	h := &gateHook{gate: make(chan struct{})}
	close(h.gate) // it only records the pipelines
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	c.AddHook(h)
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	keys := []string{"batched-0", "batched-1"}
	var (
		mu   sync.Mutex
		last = map[string]uint64{}
		in   = map[string]int{}
	)
	const workers, rounds = 16, 30
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				key := keys[(w+r)%len(keys)]
				m, err := primitives.NewMutex(s, key, primitives.WithTTL(time.Minute))
				if err != nil {
					t.Error(err)
					return
				}
				l, err := m.Acquire(ctx)
				if err != nil {
					t.Errorf("acquire %s: %v", key, err)
					return
				}
				mu.Lock()
				in[key]++
				if in[key] > 1 {
					t.Errorf("%s: two holders at once", key)
				}
				if l.Fence() <= last[key] {
					t.Errorf("%s: fence %d after %d", key, l.Fence(), last[key])
				}
				last[key] = max(last[key], l.Fence())
				mu.Unlock()
				snap, err := s.Inspect(ctx, key)
				if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != l.Holder() || snap.Leases[0].Fence != l.Fence() {
					t.Errorf("%s: inside the turn of %s at fence %d the server holds %+v (%v)", key, l.Holder(), l.Fence(), snap.Leases, err)
				}
				mu.Lock()
				in[key]--
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					t.Errorf("release %s: %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(h.sizes()) == 0 {
		t.Error("no pipeline was sent: the workers' calls never queued")
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		keys, _ := c.Keys(ctx, "*").Result()
		t.Errorf("%d keys left (%v): %v", n, err, keys)
	}
}

// acquireAnswer is what an Acquire of key returned.
type acquireAnswer struct {
	key string
	res core.AcquireResult
	err error
}

// acquiresQueuedBehindTwo has h's gate hold the Acquires of keys "first" and "second" on s, then
// queues n more behind them ("queued-0" …), each by holder "h-" and its key; the answers of all
// n+2 come on the channel once the gate opens.
func acquiresQueuedBehindTwo(t *testing.T, s *goredis.Store, h *gateHook, n int) <-chan acquireAnswer {
	t.Helper()
	answers := make(chan acquireAnswer, n+2)
	acquire := func(key string) {
		res, err := s.Acquire(context.Background(), acquireReq(key, "h-"+key))
		answers <- acquireAnswer{key, res, err}
	}
	go acquire("first")
	go acquire("second")
	poll.Until(t, "two calls held at the gate", func() bool { return h.heldCalls() == 2 })
	for i := range n {
		go acquire(fmt.Sprint("queued-", i))
	}
	poll.Until(t, "the calls queued", func() bool { return goredis.Queued(s) == n })
	return answers
}

// TestGoRedisGivesEachConcurrentCommandAConnectionOfItsOwn pins what the batcher is for:
// go-redis sends each command in flight on a pooled connection of its own, one round trip each,
// and pipelines nothing by itself. Should go-redis come to share connections between concurrent
// callers (automatic pipelining), this fails, and the batcher is to be measured again against it.
func TestGoRedisGivesEachConcurrentCommandAConnectionOfItsOwn(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, PoolSize: 16})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil { // one connection, ready
		t.Fatal(err)
	}
	proxy.Hold(true)
	const n = 8
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := c.Ping(context.Background()).Err(); err != nil {
				t.Error(err)
			}
		})
	}
	poll.Until(t, fmt.Sprintf("%d PINGs in flight, each on a connection of its own", n), func() bool {
		return c.PoolStats().TotalConns >= n
	})
	proxy.Hold(false)
	wg.Wait()
}

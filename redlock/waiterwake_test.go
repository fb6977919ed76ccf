package redlock_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/redlock"
)

// countedNode is a Redis Store that counts the acquires it answered (Redlock sends AcquireAbove;
// a primitive on the Store itself, Acquire).
type countedNode struct {
	*goredis.Store
	n       atomic.Int64
	answers chan struct{} // nil, or receives after each answer unless a value is pending
}

func (c *countedNode) answered() {
	c.n.Add(1)
	if c.answers != nil {
		select {
		case c.answers <- struct{}{}:
		default:
		}
	}
}

func (c *countedNode) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	defer c.answered()
	return c.Store.Acquire(ctx, req)
}

func (c *countedNode) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	defer c.answered()
	return c.Store.AcquireAbove(ctx, req, floor)
}

// wakeRig is three real redis-servers and, over them, Redlock Stores of their own clients (as
// separate processes would have).
type wakeRig struct {
	t     testing.TB
	addrs []string
}

func startWakeRig(t testing.TB) wakeRig {
	testenv.SkipShort(t, "starts three redis-servers")
	var addrs []string
	for range 3 {
		addrs = append(addrs, redistest.StartServer(t).Addr)
	}
	return wakeRig{t, addrs}
}

// store returns a Redlock Store over new clients of the servers, and its nodes, which count the
// acquires they are sent.
func (r wakeRig) store() (*redlock.Store, []*countedNode) {
	var ss []core.Store
	var cs []*countedNode
	for _, a := range r.addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		st, err := goredis.New(c)
		if err != nil {
			r.t.Fatal(err)
		}
		r.t.Cleanup(func() { st.Close(); c.Close() })
		cn := &countedNode{Store: st}
		cs = append(cs, cn)
		ss = append(ss, cn)
	}
	return mustNew(r.t, ss, redlock.WithNodeTimeout(2*time.Second)), cs
}

// node returns a Store over a new client of the first server alone, counting its acquires.
func (r wakeRig) node() *countedNode {
	c := redis.NewClient(&redis.Options{Addr: r.addrs[0]})
	st, err := goredis.New(c)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { st.Close(); c.Close() })
	return &countedNode{Store: st}
}

// commands returns how many commands clients have sent each server so far.
func (r wakeRig) commands() []int {
	var n []int
	for _, a := range r.addrs {
		n = append(n, redistest.ClientCommands(r.t, a))
	}
	return n
}

// subscribed reports whether every server has a client subscribed to a channel.
func (r wakeRig) subscribed() bool {
	for _, a := range r.addrs {
		out, err := redistest.Do(a, "PUBSUB", "CHANNELS")
		if err != nil {
			r.t.Fatal(err)
		}
		if strings.TrimSpace(out) == "" {
			return false
		}
	}
	return true
}

// grant is a waiter's outcome: when it was granted, or its error.
type grant struct {
	at  time.Time
	err error
}

// startWaiter starts an Acquire of mu on its own goroutine; its outcome comes on the channel
// (a lease is released at once).
func startWaiter(ctx context.Context, mu *primitives.Mutex) <-chan grant {
	got := make(chan grant, 1)
	go func() {
		l, err := mu.Acquire(ctx)
		at := time.Now()
		if err == nil {
			err = l.Release(ctx)
		}
		got <- grant{at, err}
	}()
	return got
}

// waiterMutex is a mutex on key over s that waits with a 3 s retry interval: a waiter that
// noticed the release only by retrying would take up to 3 s.
func waiterMutex(t *testing.T, s core.Store, key string) *primitives.Mutex {
	mu, err := primitives.NewMutex(s, key, primitives.WithRetryInterval(3*time.Second), primitives.WithTTL(time.Hour), primitives.WithAcquireTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return mu
}

// A waiter over Redlock of three real servers, with a 3 s retry interval, is granted well within
// the interval after the holder releases: the release is noticed, not polled for. The holder
// releases as soon as the waiter's first try was refused, before its watch is set up.
func TestRedlockWaiterIsGrantedPromptlyAfterRelease(t *testing.T) {
	t.Parallel()
	r := startWakeRig(t)
	ctx := t.Context()
	hs, _ := r.store()
	ws, wn := r.store()
	held, err := waiterMutex(t, hs, "job").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := startWaiter(ctx, waiterMutex(t, ws, "job"))
	poll.Until(t, "every node to refuse the waiter's first try", func() bool {
		return wn[0].n.Load() >= 1 && wn[1].n.Load() >= 1 && wn[2].n.Load() >= 1
	})
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-got
	if g.err != nil {
		t.Fatal(g.err)
	}
	if d := g.at.Sub(released); d > time.Second {
		t.Errorf("the waiter was granted %v after the release; want well within its 3 s retry interval", d)
	} else {
		t.Logf("granted %v after the release, which came before its watch", d)
	}

	// Again, with the waiter settled in its wait (its subscriptions confirmed) when the holder
	// releases.
	held, err = waiterMutex(t, hs, "job").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got = startWaiter(ctx, waiterMutex(t, ws, "job"))
	poll.Until(t, "the waiter's subscriptions", r.subscribed)
	released = time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if g = <-got; g.err != nil {
		t.Fatal(g.err)
	}
	if d := g.at.Sub(released); d > time.Second {
		t.Errorf("the settled waiter was granted %v after the release; want well within its 3 s retry interval", d)
	} else {
		t.Logf("granted %v after the release, which came once it was settled", d)
	}
}

// quietWaiter starts a waiter on "job" over ws, waits until it has settled, and checks it stays
// quiet while during runs (see quiet); it returns the channel its grant comes on.
func quietWaiter(t *testing.T, r wakeRig, ws core.Store, wn []*countedNode, during func()) <-chan grant {
	t.Helper()
	got := startWaiter(t.Context(), waiterMutex(t, ws, "job"))
	settledWaiter(t, r, wn, got)
	quiet(t, r, wn, got, during)
	return got
}

// mustBeGranted fails the test unless the waiter's acquire, on got, succeeded.
func mustBeGranted(t *testing.T, got <-chan grant) {
	t.Helper()
	if g := <-got; g.err != nil {
		t.Fatal(g.err)
	}
}

// settledWaiter returns once the waiter has made its tries (its first and its try after
// watching) and every server has a subscription; it fails t if the waiter returned.
func settledWaiter(t *testing.T, r wakeRig, wn []*countedNode, got <-chan grant) {
	t.Helper()
	poll.Until(t, "the waiter's try after watching, and its subscriptions", func() bool {
		return wn[0].n.Load() >= 2 && wn[1].n.Load() >= 2 && wn[2].n.Load() >= 2 && r.subscribed()
	})
	select {
	case g := <-got:
		t.Fatalf("the waiter returned while the lock was held: %v", g.err)
	default:
	}
}

// quiet checks that, for a while, no server receives a command and the waiter tries nothing.
func quiet(t *testing.T, r wakeRig, wn []*countedNode, got <-chan grant, during func()) {
	t.Helper()
	before := r.commands()
	tries := []int64{wn[0].n.Load(), wn[1].n.Load(), wn[2].n.Load()}
	if during != nil {
		during()
	}
	select {
	case g := <-got:
		t.Fatalf("the waiter returned while the lock was held: %v", g.err)
	case <-time.After(300 * time.Millisecond):
	}
	for i := range wn {
		if n := wn[i].n.Load(); n != tries[i] {
			t.Errorf("node %d: the waiter tried %d times while it waited; want no try", i, n-tries[i])
		}
	}
	if during == nil {
		if after := r.commands(); !equal(after, before) {
			t.Errorf("commands on the servers went from %v to %v while the waiter waited; want none", before, after)
		}
	}
}

func equal(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// An idle waiter over Redlock sends no command while the holder holds, and is granted on the
// release.
func TestIdleRedlockWaiterSendsNothing(t *testing.T) {
	t.Parallel()
	r := startWakeRig(t)
	ctx := t.Context()
	hs, _ := r.store()
	ws, wn := r.store()
	held, err := waiterMutex(t, hs, "job").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := quietWaiter(t, r, ws, wn, nil)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mustBeGranted(t, got)
}

// A waiter over Redlock whose holder holds a bare majority of nodes is granted on the third at
// each try, and gives it back: the change that release announces on that node is its own, and
// cannot make room, so it does not wake the waiter (which would otherwise try in a loop while
// the lock is held).
func TestRedlockWaiterIsNotWokenByItsOwnGrantGivenBack(t *testing.T) {
	t.Parallel()
	r := startWakeRig(t)
	ctx := t.Context()
	_, hn := r.store()
	ws, wn := r.store()
	req := core.AcquireRequest{Key: "job", Holder: "holder-on-two", Permits: 1, Limit: 1, TTL: time.Hour}
	for _, n := range hn[:2] {
		if res, err := n.Acquire(ctx, req); err != nil || !res.Granted {
			t.Fatalf("holder on a node: %+v, %v", res, err)
		}
	}
	got := quietWaiter(t, r, ws, wn, nil)
	for _, n := range hn[:2] {
		if _, err := n.Release(ctx, core.ReleaseRequest{Key: "job", Holder: req.Holder}); err != nil {
			t.Fatal(err)
		}
	}
	mustBeGranted(t, got)
}

// A waiter over Redlock is not woken by the release of another key, even one that is watched.
func TestRedlockWaiterIsNotWokenByAnotherKey(t *testing.T) {
	t.Parallel()
	r := startWakeRig(t)
	ctx := t.Context()
	hs, _ := r.store()
	ws, wn := r.store()
	held, err := waiterMutex(t, hs, "job").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A watch of "other", so that its releases are announced.
	obs, _ := r.store()
	w, err := obs.Watch(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	<-w.C() // the value a watch starts with
	other := waiterMutex(t, hs, "other")
	got := quietWaiter(t, r, ws, wn, func() {
		for range 5 {
			l, err := other.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		poll.Until(t, "the watch of other to hear of it", func() bool {
			select {
			case <-w.C():
				return true
			default:
				return false
			}
		})
	})
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mustBeGranted(t, got)
}

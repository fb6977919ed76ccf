package redlock_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/redlock"
)

// redisNodes starts n redis-servers and returns them with a go-redis Store on each, closed
// when t ends.
func redisNodes(t *testing.T, n int) ([]*redistest.Server, []core.Store) {
	t.Helper()
	var srvs []*redistest.Server
	var ss []core.Store
	for range n {
		srv := redistest.StartServer(t)
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		st, err := goredis.New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(); c.Close() })
		srvs, ss = append(srvs, srv), append(ss, st)
	}
	return srvs, ss
}

// stop SIGSTOPs srv: it accepts connections and answers nothing, as a hung node does. It is
// continued when t ends, before its Stores are closed.
func stop(t *testing.T, srv *redistest.Server) {
	t.Helper()
	if err := syscall.Kill(srv.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(srv.Pid(), syscall.SIGCONT) })
}

// TestMutexOverRedlockWithOneNodeHung: with one redis-server of three SIGSTOPped, a Mutex with
// a 1s TTL keeps its lease through 3s of refreshes, and acquire+release pairs return as soon as
// the two live nodes answer, far below the node timeout.
func TestMutexOverRedlockWithOneNodeHung(t *testing.T) {
	srvs, ss := redisNodes(t, 3)
	rl := mustNew(t, ss)
	stop(t, srvs[2])
	const ttl = time.Second
	nodeTimeout := min(500*time.Millisecond, ttl/10) // the documented default for this TTL
	ctx := context.Background()

	refreshed := make(chan struct{}, 100)
	m, err := primitives.NewMutex(rl, "hung", primitives.WithTTL(ttl), primitives.WithEvents(func(e primitives.Event) {
		if e.Kind == primitives.EventRefreshed {
			select {
			case refreshed <- struct{}{}:
			default:
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := time.Now()
	for n := 0; time.Since(held) < 3*time.Second; {
		select {
		case <-refreshed:
			n++
		case <-l.Done():
			t.Fatalf("lease lost after %v and %d refreshes with two of three nodes answering: %v", time.Since(held).Round(time.Millisecond), n, l.Err())
		case <-time.After(ttl):
			t.Fatalf("no refresh for a TTL after %d refreshes", n)
		}
	}
	if ok, err := l.Held(ctx); err != nil || !ok {
		t.Errorf("Held = %v, %v after 3s; want true", ok, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	const pairs = 10
	begin := time.Now()
	for range pairs {
		l, err := m.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(begin)
	t.Logf("%d acquire+release pairs with one node of three hung: %v (%v a pair; node timeout %v)", pairs, took.Round(time.Millisecond), (took / pairs).Round(time.Microsecond), nodeTimeout)
	if limit := pairs * nodeTimeout / 2; took >= limit {
		t.Errorf("%d pairs took %v, want < %v: a call waits for the hung node instead of returning on a quorum", pairs, took, limit)
	}
}

var _ = redlock.New

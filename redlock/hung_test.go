package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
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
	if err := pauseProcess(srv.Pid()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resumeProcess(srv.Pid()) })
}

// TestMutexOverRedlockWithOneNodeHung: with one redis-server of three SIGSTOPped, a Mutex with
// a 2s TTL keeps its lease through three refreshes, and acquire+release pairs return as soon as
// the two live nodes answer, far below the node timeout.
func TestMutexOverRedlockWithOneNodeHung(t *testing.T) {
	testenv.SkipShort(t, "SIGSTOPs a redis-server")
	srvs, ss := redisNodes(t, 3)
	rl := mustNew(t, ss)
	stop(t, srvs[2])
	// A TTL long enough that a loaded machine's stall does not end the lease between refreshes.
	const ttl = 2 * time.Second
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
	for n := 0; n < 3; {
		select {
		case <-refreshed:
			n++
		case <-l.Done():
			t.Fatalf("lease lost after %v and %d refreshes with two of three nodes answering: %v", time.Since(held).Round(time.Millisecond), n, l.Err())
		}
	}
	if ok, err := l.Held(ctx); err != nil || !ok {
		t.Errorf("Held = %v, %v after three refreshes; want true", ok, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A call that waited for the hung node would take the node timeout; a pair, twice that. The
	// fastest of ten pairs is compared, so that a stall of the machine in one cannot fail it.
	const pairs = 10
	fastest := time.Hour
	for range pairs {
		begin := time.Now()
		l, err := m.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		fastest = min(fastest, time.Since(begin))
	}
	t.Logf("the fastest of %d acquire+release pairs with one node of three hung: %v (node timeout %v)", pairs, fastest.Round(time.Microsecond), nodeTimeout)
	if fastest >= nodeTimeout {
		t.Errorf("the fastest acquire+release pair took %v, want < the node timeout %v: a call waits for the hung node instead of returning on a quorum", fastest, nodeTimeout)
	}
}

var _ = redlock.New

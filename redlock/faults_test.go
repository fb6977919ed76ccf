package redlock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance/history"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// TestFaultMinorityDownThenOneMore: Redlock of 5 with ⌊5/2⌋ = 2 nodes down runs the fault
// workload with a linearizable history; then a lease is held while one more node fails, and
// is reported lost (a majority can no longer be kept) by its deadline. In a bubble: the nodes
// are in memory, and fake time keeps a loaded machine's stalls from ending 300 ms leases early.
func TestFaultMinorityDownThenOneMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ns, ss := nodes(core.SystemClock{}, 5)
		ns[3].set(true, 0)
		ns[4].set(true, 0)
		const ttl = 300 * time.Millisecond
		w := &history.Workload{Keys: 2, Workers: 6, TTL: ttl, Duration: 1500 * time.Millisecond, CallBudget: 2 * time.Second,
			NewStore: func() core.Store { return mustNew(t, ss) }}
		w.Run(t)
		w.Check(t, true)

		m, _ := primitives.NewMutex(mustNew(t, ss), "one-more", primitives.WithTTL(ttl))
		l, err := m.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ns[2].set(true, 0)
		select {
		case <-l.Done():
			if late := time.Since(l.Deadline()); late > 0 {
				t.Errorf("the loss was reported %v after the lease's deadline", late)
			}
			if !errors.Is(l.Err(), core.ErrLost) {
				t.Errorf("Err = %v, want ErrLost", l.Err())
			}
		case <-time.After(2 * ttl):
			t.Fatal("a lease kept by 2 of 5 nodes was not reported lost within two TTLs")
		}
		for _, n := range ns {
			n.set(false, 0)
		}
	})
}

// TestFaultRedisNodeKilledMidRun: Redlock over three real redis-servers, one SIGKILLed and
// restarted empty mid-workload: a majority stays, calls return in time, fences increase.
func TestFaultRedisNodeKilledMidRun(t *testing.T) {
	testenv.SkipShort(t, "kills and restarts a redis-server")
	var srvs []*redistest.Server
	for range 3 {
		srvs = append(srvs, redistest.StartServer(t))
	}
	mk := func() core.Store {
		var ss []core.Store
		for _, srv := range srvs {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr})
			st, err := goredis.New(c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close(); c.Close() })
			ss = append(ss, st)
		}
		return mustNew(t, ss)
	}
	w := &history.Workload{Keys: 2, Workers: 6, TTL: 500 * time.Millisecond, Duration: 2 * time.Second, CallBudget: 2 * time.Second, NewStore: mk}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(t)
	}()
	// Mid-run: once the workers have made a few hundred calls, with more than a second to go.
	poll.Until(t, "the workload under way", func() bool { return len(w.Recorder.Ops()) >= 200 })
	srvs[1].Restart(t)
	<-done
	w.Check(t, false)
}

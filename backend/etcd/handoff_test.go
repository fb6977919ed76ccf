package etcd_test

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

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

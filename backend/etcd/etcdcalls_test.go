package etcd_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

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

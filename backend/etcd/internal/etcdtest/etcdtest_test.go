package etcdtest_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/internal/poll"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// get reads key with a timeout of d: its value, and whether the Get succeeded.
func get(c *clientv3.Client, key string, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := c.Get(ctx, key)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

func put(t *testing.T, c *clientv3.Client, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
}

func TestStartedServerStoresAndReturnsAKey(t *testing.T) {
	t.Parallel()
	s := etcdtest.Start(t)
	c := s.Client(t)
	put(t, c, "k", "v")
	if v, err := get(c, "k", 10*time.Second); err != nil || v != "v" {
		t.Fatalf("Get: %q, %v; want \"v\"", v, err)
	}
}

func TestSharedServerIsOneServer(t *testing.T) {
	t.Parallel()
	a, b := etcdtest.Shared(t), etcdtest.Shared(t)
	if a != b {
		t.Fatalf("Shared returned %s, then %s", a.Endpoint(), b.Endpoint())
	}
	put(t, a.Client(t), "shared-k", "v")
	if v, err := get(b.Client(t), "shared-k", 10*time.Second); err != nil || v != "v" {
		t.Fatalf("Get: %q, %v; want \"v\"", v, err)
	}
}

func TestPausedServerAnswersOnlyAfterResume(t *testing.T) {
	t.Parallel()
	s := etcdtest.Start(t)
	c := s.Client(t)
	put(t, c, "k", "v")
	s.Pause(t)
	if v, err := get(c, "k", 300*time.Millisecond); err == nil {
		t.Fatalf("a paused server answered a Get: %q", v)
	}
	s.Resume(t)
	poll.Until(t, "a Get answered after Resume", func() bool {
		v, err := get(c, "k", time.Second)
		return err == nil && v == "v"
	})
}

func TestRestartedServerKeepsWhatItStoredBeforeTheKill(t *testing.T) {
	t.Parallel()
	s := etcdtest.Start(t)
	c := s.Client(t)
	put(t, c, "k", "before the kill")
	s.Kill(t)
	if _, err := get(c, "k", 300*time.Millisecond); err == nil {
		t.Fatal("a killed server answered a Get")
	}
	s.Restart(t)
	// The client made before the kill reconnects to the same port.
	poll.Until(t, "the key read back after Restart", func() bool {
		v, err := get(c, "k", time.Second)
		return err == nil && v == "before the kill"
	})
}

func TestLeaseOfOneSecondIsGrantedOneSecond(t *testing.T) {
	t.Parallel()
	c := etcdtest.Shared(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL != 1 {
		t.Errorf("Grant(1) granted a TTL of %d s; want 1 (the minimum is 1 s with these settings)", l.TTL)
	}
	ttl, err := c.TimeToLive(ctx, l.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL != 1 {
		t.Errorf("TimeToLive of a lease granted with TTL 1: GrantedTTL %d s; want 1", ttl.GrantedTTL)
	}
}

func TestProxyCutBreaksTheClientsConnection(t *testing.T) {
	t.Parallel()
	s := etcdtest.Shared(t)
	p := s.Proxy(t)
	c := s.Client(t, "http://"+p.Addr)
	put(t, c, "proxy-k", "v")
	// gRPC may report the connection's state after the request it carried has returned.
	conn := c.ActiveConnection()
	poll.Until(t, "the client's connection READY after a Put", func() bool {
		return conn.GetState() == connectivity.Ready
	})

	p.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), poll.Timeout)
	defer cancel()
	if !conn.WaitForStateChange(ctx, connectivity.Ready) {
		t.Fatal("the client's connection stayed READY after the cut")
	}
	// The client reconnects through the proxy at its next request.
	poll.Until(t, "the key read through the proxy after the cut", func() bool {
		v, err := get(c, "proxy-k", time.Second)
		return err == nil && v == "v"
	})
}

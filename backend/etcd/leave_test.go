package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lineOf returns the holders waiting on key, as Inspect lists them.
func lineOf(t *testing.T, s core.Store, key string) []string {
	t.Helper()
	snap, err := s.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var hs []string
	for _, w := range snap.Waiters {
		hs = append(hs, w.Holder)
	}
	return hs
}

// An Acquire with a Wait whose ctx ends while it is in flight leaves no place behind, whenever
// its transaction lands: the Store leaves for it.
func TestCanceledAcquireLeavesNoPlace(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	a, b := newStore(t), newStore(t)
	mustAcquire(t, a, req(key, "h", 1, 1))
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i)*time.Millisecond)
		r := req(key, "w", 1, 1)
		r.Wait = time.Minute
		_, err := b.Acquire(ctx, r)
		cancel()
		if err == nil {
			b.Register(context.Background(), r) // refused in time: leave as a waiter does
			continue
		}
	}
	// The leaves may need a second for a late try; b's Inspect waits for them.
	poll.Within(t, 5*time.Second, "no place left", func() ([]string, bool) {
		l := lineOf(t, b, key)
		return l, len(l) == 0
	})
}

// A waiter's Close while the line's grant to it is being made gives that grant back: the next
// waiter gets it, and nobody is left holding the key.
func TestWaiterClosedAsItsGrantIsMadePassesItOn(t *testing.T) {
	t.Parallel()
	for i := range 10 {
		key := uniqueKey(t)
		a, b, c := newStore(t), newStore(t), newStore(t)
		h := mustAcquire(t, a, req(key, "h", 1, 1))
		wb := mustWait(t, b, req(key, "b", 1, 1))
		wc := mustWait(t, c, req(key, "c", 1, 1))
		done := make(chan struct{})
		go func() {
			defer close(done)
			if i%2 == 0 {
				time.Sleep(time.Duration(i) * time.Millisecond)
			}
			wb.Close()
		}()
		if ok, err := a.Release(context.Background(), core.ReleaseRequest{Key: key, Holder: "h", Fence: h.Fence}); err != nil || !ok {
			t.Fatalf("Release(h) = %v, %v", ok, err)
		}
		<-done
		grantedWhenWoken(t, c, wc, req(key, "c", 1, 1), 20*time.Second)
		wc.Close()
	}
}

// A waiter whose session lease ends (its Store stalled past it, or lost etcd) loses its place; it
// is woken, takes a new one, and is granted by the next release.
func TestWaiterWhoseSessionEndedIsWokenAndServed(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	a, w := newStore(t), newStore(t)
	ctx := context.Background()
	h := mustAcquire(t, a, req(key, "h", 1, 1))
	wr := req(key, "w", 1, 1)
	wt := mustWait(t, w, wr)
	select { // a new waiter may start woken
	case <-wt.C():
	default:
	}
	c := etcdClient(t)
	resp, err := c.Get(ctx, "leasehold/"+key+"/w/w")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the place's record: %v, %v", resp, err)
	}
	if _, err := c.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	grantedOrPlaced := func() {
		wr.Wait = time.Minute
		select {
		case <-wt.C():
		case <-time.After(20 * time.Second):
			t.Fatal("the waiter whose session ended was not woken")
		}
		if res, err := w.Acquire(ctx, wr); err != nil || res.Granted {
			t.Fatalf("Acquire(w) = %+v, %v; want a refusal, and a place", res, err)
		}
	}
	grantedOrPlaced()
	if l := lineOf(t, a, key); len(l) != 1 || l[0] != "w" {
		t.Fatalf("line %v; want w in it again", l)
	}
	if ok, err := a.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: h.Fence}); err != nil || !ok {
		t.Fatalf("Release(h) = %v, %v", ok, err)
	}
	grantedWhenWoken(t, w, wt, wr, 20*time.Second)
}

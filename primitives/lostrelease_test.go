package primitives_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// slowReleases is lateExtends whose Releases reach the store only once arrive is closed (a
// release delayed on the network).
type slowReleases struct {
	lateExtends
	arrive chan struct{}
}

func (s slowReleases) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	s.releases.Add(1)
	select {
	case <-s.arrive:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return s.inner.Release(ctx, req)
}

// TestLossReleaseLeavesTheHoldersNextGrantHeld: a lease under a holder id of the caller's
// choosing, lost at its deadline while the store still holds it, is granted again to the same
// id (the same lease, the same fence) when the caller acquires once more. A release in the
// background for the lost one, arriving after that grant, would end the new lease in the store
// while its holder goes on; none is sent under a chosen id, and the new lease stays held.
func TestLossReleaseLeavesTheHoldersNextGrantHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := slowReleases{lateExtends{newRecorder()}, make(chan struct{})}
		m := mustMutex(t, store, primitives.WithTTL(3*time.Second), primitives.WithHolder("worker-7"))
		l := mustAcquire(t, m)
		<-l.Done()
		l2, err := m.TryAcquire(context.Background())
		if err != nil {
			t.Fatalf("TryAcquire after the loss: %v", err)
		}
		l2.StopRefresh() // only the grant itself is looked at
		close(store.arrive)
		synctest.Wait()
		snap, _ := store.inner.Inspect(context.Background(), "job")
		if len(snap.Leases) != 1 || snap.Leases[0].Holder != "worker-7" || snap.Leases[0].Fence != l2.Fence() {
			t.Errorf("the store holds %+v after the holder acquired again, want its lease of fence %d", snap.Leases, l2.Fence())
		}
		l.Release(context.Background())
		l2.Release(context.Background())
	})
}

// TestLossOfAnAdoptedLeaseSendsNoRelease: an adopted lease's holder id is not its own (Adopt
// again by that id gets the same lease), so its loss after failed refreshes leaves it to expire.
func TestLossOfAnAdoptedLeaseSendsNoRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		first := mustAcquire(t, mustMutex(t, rec, primitives.WithTTL(3*time.Second)))
		first.StopRefresh()
		l, err := mustMutex(t, rec, primitives.WithTTL(3*time.Second)).Adopt(context.Background(), first.Holder())
		if err != nil {
			t.Fatalf("Adopt: %v", err)
		}
		rec.failExtends(errNetwork)
		<-l.Done()
		synctest.Wait()
		if n := rec.releases.Load(); n != 0 {
			t.Errorf("%d releases after the adopted lease's loss, want none", n)
		}
		first.Release(context.Background())
	})
}

// TestLostLeaseReleaseUnderAChosenHolderEndsNoLaterGrant: a lease under a holder id of the
// caller's choosing, reported lost at its deadline while the store still holds it (not
// refreshed), is granted again to the same id by the next Acquire: the same lease in the
// store, the same fence. The lost lease's Release after that must not end the new grant.
func TestLostLeaseReleaseUnderAChosenHolderEndsNoLaterGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newRecorder()
		m := mustMutex(t, store, primitives.WithTTL(3*time.Second), primitives.WithHolder("worker-7"), primitives.WithoutRefresh())
		l := mustAcquire(t, m)
		<-l.Done()
		l2 := mustAcquire(t, mustMutex(t, store, primitives.WithTTL(time.Minute), primitives.WithHolder("worker-7")))
		if err := l.Release(context.Background()); !errors.Is(err, primitives.ErrLost) {
			t.Errorf("Release of the lost lease = %v, want ErrLost", err)
		}
		if o, err := mustMutex(t, store).TryAcquire(context.Background()); err == nil {
			t.Errorf("another Mutex took the key (fence %d) while the holder's new lease (fence %d, Err %v) holds it", o.Fence(), l2.Fence(), l2.Err())
			o.Release(context.Background())
		}
		l2.Release(context.Background())
	})
}

// TestLostLeaseUnderAChosenHolderIsFreeWithinATTLOfItsLoss: a lease under a holder id of the
// caller's choosing, lost at its deadline while its refreshes reached the store late (each
// renewing the store's lease for a TTL), sends no release; the store keeps the key for at most a
// TTL from the loss, and another Mutex takes it then.
func TestLostLeaseUnderAChosenHolderIsFreeWithinATTLOfItsLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		store := lateExtends{newRecorder()}
		l := mustAcquire(t, mustMutex(t, store, primitives.WithTTL(ttl), primitives.WithHolder("worker-7")))
		<-l.Done()
		lost := time.Now()
		if err := l.Release(context.Background()); !errors.Is(err, primitives.ErrLost) {
			t.Errorf("Release of the lost lease = %v, want ErrLost", err)
		}
		synctest.Wait()
		if n := store.releases.Load(); n != 0 {
			t.Errorf("%d releases sent for the lost lease under a chosen holder, want none", n)
		}
		other := mustMutex(t, store.recorder, primitives.WithTTL(time.Minute))
		for {
			o, err := other.TryAcquire(context.Background())
			if err == nil {
				o.Release(context.Background())
				break
			}
			if !errors.Is(err, primitives.ErrNotAcquired) {
				t.Fatal(err)
			}
			if time.Since(lost) > ttl {
				t.Fatalf("the key is still held %v after the loss, more than a TTL (%v)", time.Since(lost), ttl)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("free %v after the loss", time.Since(lost))
	})
}

package primitives_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// hangingExtends is a Store whose Extends, while hang is set, wait for their ctx to end and
// return its error without reaching the store.
type hangingExtends struct {
	core.Store
	hang    *atomic.Bool
	extends *atomic.Int64
}

func (s hangingExtends) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	s.extends.Add(1)
	if s.hang.Load() {
		<-ctx.Done()
		return core.ExtendResult{}, ctx.Err()
	}
	return s.Store.Extend(ctx, req)
}

// TestReleaseDuringARefreshInFlightAbortsItAndReleases: Release while a background refresh is
// in flight, sent to a store that does not answer or waiting for a Lease.Extend that does not,
// aborts the refresh, releases the key in the store and reports released, with no refresh
// failure counted for the abort.
func TestReleaseDuringARefreshInFlightAbortsItAndReleases(t *testing.T) {
	for _, behindExtend := range []bool{false, true} {
		name := "refresh sent"
		if behindExtend {
			name = "refresh waiting for a Lease.Extend"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inner := memory.New()
				store := hangingExtends{inner, new(atomic.Bool), new(atomic.Int64)}
				var log eventLog
				m := mustMutex(t, store, primitives.WithTTL(3*time.Second), primitives.WithEvents(log.add))
				l := mustAcquire(t, m)
				store.hang.Store(true)
				extendCtx, cancelExtend := context.WithCancel(context.Background())
				extended := make(chan error, 1)
				if behindExtend {
					go func() {
						_, err := l.Extend(extendCtx, 3*time.Second)
						extended <- err
					}()
				}
				time.Sleep(1500 * time.Millisecond) // the refresh at 1s is in flight
				synctest.Wait()
				// One Extend reached the store: the refresh's, or Lease.Extend's that the refresh waits for.
				if n := store.extends.Load(); n != 1 {
					t.Fatalf("%d Extends reached the store, want 1", n)
				}
				if err := l.Release(context.Background()); err != nil {
					t.Fatalf("Release during a refresh in flight = %v, want nil", err)
				}
				if behindExtend {
					cancelExtend()
					if err := <-extended; err == nil {
						t.Error("Lease.Extend canceled after Release = nil, want its error")
					}
					if n := store.extends.Load(); n != 1 {
						t.Errorf("%d Extends reached the store, want 1: the refresh aborted by Release was sent", n)
					}
				}
				cancelExtend()
				if err := l.Err(); err != nil {
					t.Errorf("Err after Release = %v, want nil", err)
				}
				select {
				case <-l.Done():
				default:
					t.Error("Done not closed after Release")
				}
				other := mustMutex(t, inner, primitives.WithTTL(time.Minute))
				o, err := other.TryAcquire(context.Background())
				if err != nil {
					t.Fatalf("another Mutex's TryAcquire after Release = %v, want the key free", err)
				}
				mustRelease(t, o)
				time.Sleep(10 * time.Second) // no refresh, failure or loss reported after Release
				synctest.Wait()
				if got, want := strings.Join(log.kinds(), " "), "acquired released"; got != want {
					t.Errorf("events %q, want %q", got, want)
				}
			})
		})
	}
}

package memory_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

// Values that look like the stored formats' own syntax — newlines, " q", digits and spaces, NUL,
// a length prefix — come back from Inspect exactly, as a lease's, as a waiter's and as an untaken
// grant's value; the line's grant with a value that its waiter gives back is gone, value and all;
// a watched key (the holders entry ”) changes none of it.
func TestValuesThatLookLikeTheFormat_review17(t *testing.T) {
	values := []string{
		"\n", " q", "1 2", "1 2 q\n3", "q", "\x00", "a\x00b\n", "5 abc", "2 7 hello\n",
		"0 99999999999999", strings.Repeat("\n", core.MaxValueLen), strings.Repeat("9 ", core.MaxValueLen/2),
	}
	for _, name := range []string{"memory"} {
		t.Run(name, func(t *testing.T) {
			s := memory.New()
			w, err := s.Watch(t.Context(), "vals-"+name)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			for i, v := range values {
				key := "vals-" + name
				a := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, Value: v}
				mustAcquire(t, s, a, true)
				b := a
				b.Holder, b.Value, b.Wait = "b", v+"#b", time.Minute
				mustAcquire(t, s, b, false)
				waiter, err := s.Register(t.Context(), b)
				if err != nil {
					t.Fatal(err)
				}
				snap, err := s.Inspect(t.Context(), key)
				if err != nil {
					t.Fatal(err)
				}
				if len(snap.Leases) != 1 || snap.Leases[0].Holder != "a" || snap.Leases[0].Value != v ||
					len(snap.Waiters) != 1 || snap.Waiters[0].Holder != "b" || snap.Waiters[0].Value != v+"#b" {
					t.Fatalf("value %d %q: Inspect = %+v", i, v, snap)
				}
				if ok, err := s.Release(t.Context(), core.ReleaseRequest{Key: key, Holder: "a"}); !ok || err != nil {
					t.Fatalf("release: %v %v", ok, err)
				}
				snap, err = s.Inspect(t.Context(), key)
				if err != nil {
					t.Fatal(err)
				}
				if len(snap.Leases) != 1 || snap.Leases[0].Holder != "b" || snap.Leases[0].Value != v+"#b" || len(snap.Waiters) != 0 {
					t.Fatalf("value %d %q: after the release, Inspect = %+v; want b's untaken grant with its value", i, v, snap)
				}
				waiter.Close() // gives the untaken grant back
				if snap, err := s.Inspect(t.Context(), key); err != nil || len(snap.Leases) != 0 || len(snap.Waiters) != 0 {
					t.Fatalf("after the waiter left: %+v %v", snap, err)
				}
				// Nothing of b's is left to count: a full lease is granted.
				c := a
				c.Holder = "c"
				mustAcquire(t, s, c, true)
				if ok, err := s.Release(t.Context(), core.ReleaseRequest{Key: key, Holder: "c"}); !ok || err != nil {
					t.Fatalf("release c: %v %v", ok, err)
				}
			}
		})
	}
}

func mustAcquire(t *testing.T, s core.Store, req core.AcquireRequest, granted bool) core.AcquireResult {
	t.Helper()
	res, err := s.Acquire(context.Background(), req)
	if err != nil || res.Granted != granted {
		t.Fatalf("Acquire(%s) = %+v, %v; want granted %v", req.Holder, res, err, granted)
	}
	return res
}

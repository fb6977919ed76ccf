package primitives_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// shortGrant is a Store whose grants say they have only ttl left (AcquireResult.TTL), as a
// grant from the line taken without a round trip does.
type shortGrant struct {
	*recorder
	ttl  time.Duration
	gate chan struct{} // Extend waits until it is closed
}

func (s shortGrant) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	<-s.gate
	return s.recorder.Extend(ctx, req)
}

func (s shortGrant) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	res, err := s.recorder.Acquire(ctx, req)
	if res.Granted {
		res.TTL = s.ttl
	}
	return res, err
}

// TestGrantWithLessTTLShortensTheDeadline: a grant whose store says it has less than the
// request's TTL left gets a deadline counted from that, not from the call, and is refreshed
// before it; one with the full TTL (zero) keeps the deadline counted from the call. In a synctest
// bubble, with the store's Extend held until the deadline of the grant has been read, so that
// the refresh (due at once for the short grant) runs only when the test lets it.
func TestGrantWithLessTTLShortensTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ttl := time.Minute
		for _, left := range []time.Duration{10 * time.Second, 0} {
			st := shortGrant{newRecorder(), left, make(chan struct{})}
			m, err := primitives.NewMutex(st, "short", primitives.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			called := time.Now()
			l, err := m.Acquire(context.Background())
			returned := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			want := ttl
			if left > 0 {
				want = left
			}
			if d := l.Deadline(); d.After(returned.Add(want)) || d.Before(called.Add(want-ttl/50-10*time.Millisecond)) {
				t.Errorf("grant with TTL %v left: deadline %v after the call, want about %v", left, d.Sub(called), want)
			}
			close(st.gate)
			synctest.Wait() // a refresh that is due has run now
			refreshes := int64(0)
			if left > 0 {
				refreshes = 1 // due a third of the TTL after the grant began, which is past
			}
			if n := st.extends.Load(); n != refreshes {
				t.Errorf("grant with TTL %v left: %d refreshes at once, want %d", left, n, refreshes)
			}
			if d := l.Deadline(); left > 0 && (d.After(time.Now().Add(ttl)) || d.Before(time.Now().Add(ttl-ttl/50-10*time.Millisecond))) {
				t.Errorf("grant with TTL %v left: after its refresh, deadline %v from now, want about %v", left, time.Until(d), ttl)
			}
			l.Release(context.Background())
		}
	})
}

// unsharedSeen is a Store that records each Acquire's Unshared.
type unsharedSeen struct {
	*recorder
	seen []bool
}

func (u *unsharedSeen) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	u.seen = append(u.seen, req.Unshared)
	return u.recorder.Acquire(ctx, req)
}

// TestOnlyDrawnHoldersAreUnshared: an acquire under the id the portable layer draws says its
// holder is unshared (a store may hand it a grant without a round trip); one under a WithHolder
// id, which other callers may share, does not.
func TestOnlyDrawnHoldersAreUnshared(t *testing.T) {
	for _, tc := range []struct {
		opts []primitives.Option
		want bool
	}{{nil, true}, {[]primitives.Option{primitives.WithHolder("shared-id")}, false}} {
		st := &unsharedSeen{recorder: newRecorder()}
		m, err := primitives.NewMutex(st, "unshared", tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		l.Release(context.Background())
		if len(st.seen) != 1 || st.seen[0] != tc.want {
			t.Errorf("options %v: Unshared %v, want %v", tc.opts, st.seen, tc.want)
		}
	}
}

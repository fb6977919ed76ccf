package goredis_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// fcalls returns how many FCALLs the server at addr has run.
func fcalls(t *testing.T, addr string) int {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_fcall:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// TestLateLeaveSparesTheHoldersNewerTry: under a shared holder id (WithHolder), a leave of the
// holder's place that reaches the server late — after the Store gave up on it (its 2 s), and
// after the same holder's next try, which found the place still there and kept it — neither
// takes that try's place out of the line nor passes on the grant the line made it since: the
// try named the leave, whose reply had not come, and the server keeps such a leave from doing
// anything. (Stuck on its way here in a proxy; pipelined or sent again, the same.)
func TestLateLeaveSparesTheHoldersNewerTry(t *testing.T) {
	t.Parallel()
	for _, granted := range []bool{false, true} {
		name := "place"
		if granted {
			name = "untaken grant"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			px := redistest.StartProxy(t, srv.Addr)
			client := redis.NewClient(&redis.Options{Addr: px.Addr, ReadTimeout: 10 * time.Second})
			t.Cleanup(func() { client.Close() })
			s, err := goredis.New(client)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			ctx := t.Context()
			const key = "late-leave"
			a := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
			h := core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
			if res, err := s.Acquire(ctx, a); err != nil || !res.Granted {
				t.Fatalf("Acquire(a) = %+v, %v", res, err)
			}
			if res, err := s.Acquire(ctx, h); err != nil || res.Granted {
				t.Fatalf("Acquire(h) = %+v, %v; want a place in line", res, err)
			}

			// h gives up its place; the leave is stuck on the way, and the Store gives up on it.
			arrived, deliver := px.HoldRequest(rediscore.FunctionName(4)) // leave is Script 4
			defer deliver()
			ended, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := s.Register(ended, h); err == nil {
				t.Fatal("Register with a canceled ctx = nil error")
			}
			<-arrived
			if _, err := s.Inspect(ctx, key); err != nil { // waits for the Store's leave to end
				t.Fatal(err)
			}

			// h tries again: the place is still there, and is this try's now.
			if res, err := s.Acquire(ctx, h); err != nil || res.Granted {
				t.Fatalf("Acquire(h) again = %+v, %v; want a place in line", res, err)
			}
			var fence uint64
			if granted {
				if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
					t.Fatalf("Release(a) = %v, %v", ok, err)
				}
				snap, err := s.Inspect(ctx, key)
				if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "h" {
					t.Fatalf("Inspect after a's release = %+v, %v; want h's grant from the line", snap, err)
				}
				fence = snap.Leases[0].Fence
			}

			// The old leave arrives.
			before := fcalls(t, srv.Addr)
			deliver()
			poll.Until(t, "the late leave to run", func() bool { return fcalls(t, srv.Addr) > before })
			snap, err := s.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if !granted {
				if len(snap.Waiters) != 1 || snap.Waiters[0].Holder != "h" {
					t.Fatalf("line after the late leave = %+v; want h's place, which its newer try kept", snap.Waiters)
				}
				return
			}
			if len(snap.Leases) != 1 || snap.Leases[0].Holder != "h" || snap.Leases[0].Fence != fence {
				t.Fatalf("leases after the late leave = %+v; want h's grant of fence %d, which its newer try waits for", snap.Leases, fence)
			}
			if res, err := s.Acquire(ctx, h); err != nil || !res.Granted || res.Fence != fence {
				t.Fatalf("Acquire(h) after its grant = %+v, %v; want the grant of fence %d", res, err, fence)
			}
		})
	}
}

// TestDeadPlaceOfAnOvertakenLeaveIsPassedOn: under a shared holder id, a waiter gives up and its
// leave is stuck on the way until the Store gives up on it; the holder's next call is a try that
// does not wait, which names the leave (so it will do nothing) but takes no place: the old place
// stays in the line with nobody waiting on it, and the late leave, which would have removed it,
// is kept out. It must not strand the line: when the holder of the key releases, the grant the
// dead place gets is given back by its Store, and the next waiter is served within seconds.
func TestDeadPlaceOfAnOvertakenLeaveIsPassedOn(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	px := redistest.StartProxy(t, srv.Addr)
	client := redis.NewClient(&redis.Options{Addr: px.Addr, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { client.Close() })
	s, err := goredis.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	other := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { other.Close() })
	s2, err := goredis.New(other)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	ctx := t.Context()
	const key = "dead-place"
	a := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	h := core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	if res, err := s2.Acquire(ctx, a); err != nil || !res.Granted {
		t.Fatalf("Acquire(a) = %+v, %v", res, err)
	}
	if res, err := s.Acquire(ctx, h); err != nil || res.Granted {
		t.Fatalf("Acquire(h) = %+v, %v; want a place in line", res, err)
	}
	arrived, deliver := px.HoldRequest(rediscore.FunctionName(4)) // leave is Script 4
	defer deliver()
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Register(ended, h); err == nil {
		t.Fatal("Register with a canceled ctx = nil error")
	}
	<-arrived
	if _, err := s.Inspect(ctx, key); err != nil { // waits for the Store's leave to end
		t.Fatal(err)
	}
	try := h
	try.Wait = 0
	if res, err := s.Acquire(ctx, try); err != nil || res.Granted {
		t.Fatalf("h's try that does not wait = %+v, %v; want refused", res, err)
	}
	before := fcalls(t, srv.Addr)
	deliver()
	poll.Until(t, "the late leave to run", func() bool { return fcalls(t, srv.Addr) > before })
	if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Waiters) != 1 || snap.Waiters[0].Holder != "h" {
		t.Fatalf("line after the late leave = %+v, %v; want h's dead place, the leave kept out", snap, err)
	}

	// w waits behind the dead place; a releases.
	w := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	if res, err := s2.Acquire(ctx, w); err != nil || res.Granted {
		t.Fatalf("Acquire(w) = %+v, %v; want a place behind h's", res, err)
	}
	if ok, err := s2.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
		t.Fatalf("Release(a) = %v, %v", ok, err)
	}
	poll.Within(t, 8*time.Second, "w served after a's release, behind h's dead place", func() (core.AcquireResult, bool) {
		res, err := s2.Acquire(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		return res, res.Granted
	})
}

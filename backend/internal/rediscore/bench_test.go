package rediscore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// BenchmarkStorePair: one Store Acquire and Release on a free key, per driver: two round trips.
func BenchmarkStorePair(b *testing.B) {
	srv := redistest.StartServer(b)
	for name, mk := range redisharness.Drivers {
		b.Run(name, func(b *testing.B) {
			s := mk(b, srv.Addr)
			ctx := context.Background()
			req := core.AcquireRequest{Key: "pair", Holder: "h", Permits: 1, Limit: 1, TTL: 10 * time.Second, Wait: 10 * time.Second}
			b.ReportAllocs()
			for b.Loop() {
				if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
					b.Fatal(res, err)
				}
				if _, err := s.Release(ctx, core.ReleaseRequest{Key: "pair", Holder: "h"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMutexPair: one Mutex Acquire and Release on a free key, per driver, with the
// primitives' defaults (a fresh holder id, a refreshed lease): two round trips; under
// context.Background, and under a ctx that can be canceled but has no deadline (a request's,
// say), which a driver may send otherwise (see goredis.New and valkey.New). It also reports the
// client's CPU time per pair (this process's, user and system: the benchmark's goroutines and
// the Go runtime, not redis-server), which moves less with the machine's load than the time.
func BenchmarkMutexPair(b *testing.B) {
	srv := redistest.StartServer(b)
	for name, mk := range redisharness.Drivers {
		for _, cancelable := range []bool{false, true} {
			ctxName := "background"
			if cancelable {
				ctxName = "cancelable"
			}
			b.Run(name+"/"+ctxName, func(b *testing.B) {
				m, _ := primitives.NewMutex(mk(b, srv.Addr), "mutex")
				ctx := context.Background()
				if cancelable {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					defer cancel()
				}
				b.ReportAllocs()
				cpu0, cpuOK := processCPU()
				for b.Loop() {
					l, err := m.Acquire(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
				if cpu1, ok := processCPU(); ok && cpuOK {
					b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "client-cpu-us/op")
				}
			})
		}
	}
}

// BenchmarkHandoff: a lock passed between workers, each with its own Store and client (or, for
// "shared", two workers on one Store, which hands over from the release's reply); the release
// grants it to the next in line. It reports commands per pair.
func BenchmarkHandoff(b *testing.B) {
	srv := redistest.StartServer(b)
	for name, mk := range redisharness.Drivers {
		for _, workers := range []int{2, 16, -2} {
			label := fmt.Sprint(workers)
			if workers < 0 {
				workers, label = -workers, fmt.Sprint("shared-", -workers)
			}
			b.Run(fmt.Sprintf("%s/%s", name, label), func(b *testing.B) {
				var ms []*primitives.Mutex
				var shared redisharness.Store
				for range workers {
					s := shared
					if s == nil {
						s = mk(b, srv.Addr)
					}
					if label != fmt.Sprint(workers) {
						shared = s
					}
					m, _ := primitives.NewMutex(s, "handoff:"+label, primitives.WithAcquireTimeout(time.Minute))
					ms = append(ms, m)
				}
				left := make(chan struct{}, b.N)
				for range b.N {
					left <- struct{}{}
				}
				close(left)
				before := redistest.ClientCommands(b, srv.Addr)
				b.ResetTimer()
				done := make(chan struct{})
				for _, m := range ms {
					go func() {
						defer func() { done <- struct{}{} }()
						ctx := context.Background()
						for range left {
							l, err := m.Acquire(ctx)
							if err != nil {
								b.Error(err)
								return
							}
							l.Release(ctx)
						}
					}()
				}
				for range ms {
					<-done
				}
				b.StopTimer()
				b.ReportMetric(float64(redistest.ClientCommands(b, srv.Addr)-before)/float64(b.N), "cmds/pair")
			})
		}
	}
}

// BenchmarkScriptCost: the server's own time per call (INFO commandstats usec_per_call of FCALL,
// or of EVALSHA where the server refuses functions), one call at a time on keys nobody watches:
// the scripts' cost inside Redis, without the network. It reports, per operation, the acquire
// script granting a free key used before (the common case: the lease hash keeps the key's
// counters) and a new one; the extend of that lease; the release ending it and finding nobody in
// line; and a handoff's two calls: the waiter's refused try, which takes a place in the line,
// and the holder's release, which grants the lock to that waiter.
func BenchmarkScriptCost(b *testing.B) {
	srv := redistest.StartServer(b)
	s := redisharness.GoRedis(b, srv.Addr)
	ctx := context.Background()
	key := func(i int) string { return fmt.Sprint("cost:", i) }
	req := func(i int, holder string) core.AcquireRequest {
		return core.AcquireRequest{Key: key(i), Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Value: "host-a pid 4242"}
	}
	s.Acquire(ctx, req(-1, "h")) // load the scripts
	s.Release(ctx, core.ReleaseRequest{Key: key(-1), Holder: "h"})
	phase := func(op func(i int) error) float64 {
		if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
			b.Fatal(err)
		}
		for i := range b.N {
			if err := op(i); err != nil {
				b.Fatal(err)
			}
		}
		return usecPerCall(b, srv.Addr, "cmdstat_fcall")
	}
	acquire := func(holder string, granted bool) func(i int) error {
		return func(i int) error {
			res, err := s.Acquire(ctx, req(i, holder))
			if err == nil && res.Granted != granted {
				err = fmt.Errorf("key %s: %s's acquire granted %v, want %v", key(i), holder, res.Granted, granted)
			}
			return err
		}
	}
	release := func(holder string) func(i int) error {
		return func(i int) error {
			held, err := s.Release(ctx, core.ReleaseRequest{Key: key(i), Holder: holder})
			if err == nil && !held {
				err = fmt.Errorf("key %s: %s held nothing to release", key(i), holder)
			}
			return err
		}
	}
	extend := func(i int) error {
		_, err := s.Extend(ctx, core.ExtendRequest{Key: key(i), Holder: "h", TTL: time.Minute})
		return err
	}
	b.ResetTimer()
	fresh := phase(acquire("h", true))
	phase(release("h"))
	acq := phase(acquire("h", true))
	ext := phase(extend)
	rel := phase(release("h"))
	phase(acquire("h", true))
	refused := phase(acquire("w", false))
	// Each waiter enrolls, as a waiting Mutex does: the release grants only to a waiter whose
	// Store listens.
	waiters := make([]core.Wake, b.N)
	for i := range b.N {
		w, err := s.Register(ctx, req(i, "w"))
		if err != nil {
			b.Fatal(err)
		}
		waiters[i] = w
	}
	granting := phase(release("h"))
	phase(acquire("w", true)) // each waiter takes the line's grant
	for _, w := range waiters {
		w.Close()
	}
	phase(release("w"))
	b.ReportMetric(acq, "acquire-usec/call")
	b.ReportMetric(fresh, "new-key-acquire-usec/call")
	b.ReportMetric(ext, "extend-usec/call")
	b.ReportMetric(rel, "release-usec/call")
	b.ReportMetric(refused, "refused-try-usec/call")
	b.ReportMetric(granting, "granting-release-usec/call")
}

// usecPerCall returns the usec_per_call of the command stats line that starts with stat.
func usecPerCall(b *testing.B, addr, stat string) float64 {
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, stat+":") {
			continue
		}
		_, rest, _ := strings.Cut(line, "usec_per_call=")
		v, _, _ := strings.Cut(rest, ",")
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatal(line, err)
		}
		return f
	}
	b.Fatalf("no %s in INFO commandstats", stat)
	return 0
}

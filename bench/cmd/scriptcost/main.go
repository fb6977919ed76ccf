// Command scriptcost counts the instructions a Redis server executes for each Leasehold Store
// operation: the server-side cost of Leasehold's functions, the client left out. It starts its
// own redis-server under valgrind's callgrind on a free loopback port, and for each operation
// zeroes the server's counts (callgrind_control -z), runs the operation n times, dumps the counts
// (callgrind_control -d) and prints the instructions per call, in thousands, as a markdown table.
//
//	cd bench && go run ./cmd/scriptcost [-n 500] [-drv goredis|valkey] [-only pair,mutex]
//
// It needs valgrind (with callgrind_control) and redis-server on PATH. The count is the whole
// server process's while the operations run: parsing the command, the function's Lua, the reply
// and the event loop, one connection's worth (the client is alone). Instruction counts barely
// move from run to run, unlike times on a shared machine; the header names the commit (and says
// "dirty" if the tree has changes), so that runs at two commits can be set side by side.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

func main() {
	n := flag.Int("n", 500, "operations per phase")
	drv := flag.String("drv", "goredis", "the driver: goredis or valkey")
	only := flag.String("only", "", "comma-separated phases to run (default all): "+strings.Join(phaseNames(), ","))
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *n, *drv, *only)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scriptcost:", err)
		os.Exit(1)
	}
}

// phase is one operation measured: setup readies its keys, uncounted; op is the i-th call.
type phase struct {
	name, what string
	setup      func(ctx context.Context, b *bench) error
	op         func(ctx context.Context, b *bench, i int) error
}

// bench is what the phases share: the Store, n, the mutex phase's Mutex, and the waiters to
// close at the end.
type bench struct {
	s       core.Store
	n       int
	mutex   *primitives.Mutex
	waiters []core.Wake
}

func run(ctx context.Context, n int, drv, only string) error {
	if n < 1 {
		return fmt.Errorf("-n %d: must be at least 1", n)
	}
	if drv != "goredis" && drv != "valkey" {
		return fmt.Errorf("-drv %q: must be goredis or valkey", drv)
	}
	chosen, err := choose(only)
	if err != nil {
		return err
	}
	srv, err := launch(ctx)
	if err != nil {
		return err
	}
	defer srv.close()
	s, closeStore, err := open(drv, srv.addr)
	if err != nil {
		return err
	}
	b := &bench{s: s, n: n}
	defer func() {
		for _, w := range b.waiters {
			w.Close()
		}
		closeStore()
	}()

	if _, err := redistest.Do(srv.addr, "FLUSHALL"); err != nil {
		return fmt.Errorf("FLUSHALL: %w", err)
	}
	// Load the functions and open the connections before anything is counted.
	if err := pair(ctx, s, "warm", "h", core.AcquireRequest{}); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}

	fmt.Printf("`cd bench && go run ./cmd/scriptcost %s` · leasehold %s · redis-server %s under callgrind · %d calls per operation\n\n",
		strings.Join(os.Args[1:], " "), commit(), srv.version, n)
	fmt.Println("| operation | k instructions per call | what it is |")
	fmt.Println("|---|---:|---|")
	for _, p := range chosen {
		if p.setup != nil {
			if err := p.setup(ctx, b); err != nil {
				return fmt.Errorf("%s: setup: %w", p.name, err)
			}
		}
		if err := zero(ctx, srv.pid()); err != nil {
			return err
		}
		for i := range n {
			if err := p.op(ctx, b, i); err != nil {
				return fmt.Errorf("%s: call %d: %w", p.name, i, err)
			}
		}
		total, err := dump(ctx, srv.pid(), srv.dir)
		if err != nil {
			return err
		}
		fmt.Printf("| %s | %.1f | %s |\n", p.name, float64(total)/float64(n)/1000, p.what)
	}
	return nil
}

// open returns a Store of the driver drv on the server at addr, and how to close it.
func open(drv, addr string) (core.Store, func(), error) {
	switch drv {
	case "goredis":
		rc := redis.NewClient(&redis.Options{Addr: addr})
		s, err := goredis.New(rc)
		if err != nil {
			rc.Close()
			return nil, nil, err
		}
		return s, func() { s.Close(); rc.Close() }, nil
	case "valkey":
		vc, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			return nil, nil, err
		}
		s, err := valkey.New(vc)
		if err != nil {
			vc.Close()
			return nil, nil, err
		}
		return s, func() { s.Close(); vc.Close() }, nil
	}
	return nil, nil, fmt.Errorf("-drv %q: must be goredis or valkey", drv)
}

// commit returns the short commit of the working tree, with " dirty" if it has changes.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "(commit unknown)"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += " dirty"
	}
	return c
}

// choose returns the phases named in only (a comma-separated list), in their order; all of them
// when only is empty.
func choose(only string) ([]phase, error) {
	if only == "" {
		return phases, nil
	}
	names := strings.Split(only, ",")
	for _, name := range names {
		if !slices.Contains(phaseNames(), name) {
			return nil, fmt.Errorf("-only: no phase %q (phases: %s)", name, strings.Join(phaseNames(), ","))
		}
	}
	var chosen []phase
	for _, p := range phases {
		if slices.Contains(names, p.name) {
			chosen = append(chosen, p)
		}
	}
	return chosen, nil
}

func phaseNames() []string {
	var names []string
	for _, p := range phases {
		names = append(names, p.name)
	}
	return names
}

// key is the i-th key of a phase's own keys.
func key(prefix string, i int) string { return fmt.Sprint(prefix, i) }

// pair acquires key for holder with the options of opt, expecting a grant, and releases it.
func pair(ctx context.Context, s core.Store, key, holder string, opt core.AcquireRequest) error {
	req := opt
	req.Key, req.Holder, req.Permits, req.Limit, req.TTL = key, holder, 1, 1, 10*time.Second
	r, err := s.Acquire(ctx, req)
	if err != nil {
		return err
	}
	if !r.Granted {
		return fmt.Errorf("acquire of free key %s refused", key)
	}
	return release(ctx, s, key, holder, r.Fence)
}

// acquire acquires key for holder, with wait, expecting granted.
func acquire(ctx context.Context, s core.Store, key, holder string, wait time.Duration, granted bool) error {
	r, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: wait})
	if err != nil {
		return err
	}
	if r.Granted != granted {
		return fmt.Errorf("acquire of %s by %s: granted %v, want %v", key, holder, r.Granted, granted)
	}
	return nil
}

// release releases holder's lease on key (of fence, if not 0), expecting it held.
func release(ctx context.Context, s core.Store, key, holder string, fence uint64) error {
	ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: holder, Fence: fence})
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("release of %s by %s: not held", key, holder)
	}
	return nil
}

// holdAll has holder acquire each of the phase's n keys of prefix.
func holdAll(ctx context.Context, b *bench, prefix, holder string) error {
	for i := range b.n {
		if err := acquire(ctx, b.s, key(prefix, i), holder, 0, true); err != nil {
			return err
		}
	}
	return nil
}

var phases = []phase{
	{name: "pair", what: "Store Acquire + Release of a free key",
		op: func(ctx context.Context, b *bench, i int) error {
			return pair(ctx, b.s, "pair", key("h", i), core.AcquireRequest{})
		}},
	{name: "node-pair", what: "AcquireAbove with a floor 1 s above the local clock + Release: one Redlock node's pair",
		op: func(ctx context.Context, b *bench, i int) error {
			fr, ok := b.s.(core.FenceRaiser)
			if !ok {
				return fmt.Errorf("the Store is no core.FenceRaiser")
			}
			floor := uint64(time.Now().UnixMicro()) + uint64(time.Second/time.Microsecond)
			r, err := fr.AcquireAbove(ctx, core.AcquireRequest{Key: "node", Holder: key("h", i), Permits: 1, Limit: 1, TTL: 10 * time.Second, Unshared: true}, floor)
			if err != nil {
				return err
			}
			if !r.Granted {
				return fmt.Errorf("acquire of free key node refused")
			}
			return release(ctx, b.s, "node", key("h", i), r.Fence)
		}},
	{name: "pair-wait", what: "pair, the Acquire with Wait and Unshared (a waiting Mutex's first try)",
		op: func(ctx context.Context, b *bench, i int) error {
			return pair(ctx, b.s, "pair-wait", key("h", i), core.AcquireRequest{Wait: 10 * time.Second, Unshared: true})
		}},
	{name: "pair-value", what: "pair, the Acquire with a Value (\"host-a pid 4242\")",
		op: func(ctx context.Context, b *bench, i int) error {
			return pair(ctx, b.s, "pair-value", key("h", i), core.AcquireRequest{Value: "host-a pid 4242"})
		}},
	{name: "mutex", what: "primitives.Mutex Acquire + Release, uncontended",
		setup: func(_ context.Context, b *bench) (err error) {
			b.mutex, err = primitives.NewMutex(b.s, "mutex")
			return err
		},
		op: func(ctx context.Context, b *bench, _ int) error {
			l, err := b.mutex.Acquire(ctx)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
	{name: "acquire", what: "Acquire alone, granted, of a free key (a key each)",
		op: func(ctx context.Context, b *bench, i int) error {
			return acquire(ctx, b.s, key("a:", i), "h", 0, true)
		}},
	{name: "release", what: "Release alone of a held lease (a key each)",
		setup: func(ctx context.Context, b *bench) error { return holdAll(ctx, b, "r:", "h") },
		op: func(ctx context.Context, b *bench, i int) error {
			return release(ctx, b.s, key("r:", i), "h", 0)
		}},
	{name: "extend", what: "Extend of a held lease (a key each)",
		setup: func(ctx context.Context, b *bench) error { return holdAll(ctx, b, "e:", "h") },
		op: func(ctx context.Context, b *bench, i int) error {
			_, err := b.s.Extend(ctx, core.ExtendRequest{Key: key("e:", i), Holder: "h", TTL: time.Minute})
			return err
		}},
	{name: "refused", what: "Acquire refused, with Wait: it takes a place in the key's line",
		setup: func(ctx context.Context, b *bench) error { return holdAll(ctx, b, "w:", "h") },
		op: func(ctx context.Context, b *bench, i int) error {
			return acquire(ctx, b.s, key("w:", i), "w", time.Minute, false)
		}},
	{name: "granting", what: "Release that grants the head of the line (one waiter, subscribed)",
		setup: func(ctx context.Context, b *bench) error {
			if err := holdAll(ctx, b, "g:", "h"); err != nil {
				return err
			}
			notifier, ok := b.s.(core.Notifier)
			if !ok {
				return fmt.Errorf("the Store is no core.Notifier")
			}
			var waiters []core.Wake
			for i := range b.n {
				req := core.AcquireRequest{Key: key("g:", i), Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
				if err := acquire(ctx, b.s, req.Key, req.Holder, req.Wait, false); err != nil {
					return err
				}
				w, err := notifier.Register(ctx, req)
				if err != nil {
					return err
				}
				waiters = append(waiters, w)
				b.waiters = append(b.waiters, w)
			}
			// The subscriptions are confirmed before the count starts.
			return waitFor(ctx, time.Minute, "every waiter's subscription is confirmed", func() (bool, error) {
				for _, w := range waiters {
					if !w.Reliable() {
						return false, nil
					}
				}
				return true, nil
			})
		},
		op: func(ctx context.Context, b *bench, i int) error {
			return release(ctx, b.s, key("g:", i), "h", 0)
		}},
}

package rediscore_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// calls returns how many times the server at addr ran each of names since its stats were
// reset (INFO commandstats).
func calls(t *testing.T, addr string, names ...string) map[string]int {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]int)
	for _, line := range strings.Split(info, "\n") {
		for _, name := range names {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls="); ok {
				n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				got[name] = n
			}
		}
	}
	return got
}

// pairOn acquires and releases key through s.
func pairOn(t *testing.T, s core.Store, key string) {
	t.Helper()
	ctx := context.Background()
	res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute})
	if err != nil || !res.Granted {
		t.Fatalf("acquire %q: %+v, %v", key, res, err)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: res.Fence}); err != nil || !ok {
		t.Fatalf("release %q: %v, %v", key, ok, err)
	}
}

func do(t *testing.T, addr string, args ...string) {
	t.Helper()
	if reply, err := redistest.Do(addr, args...); err != nil || strings.HasPrefix(reply, "-") {
		t.Fatalf("%v: %q, %v", args, reply, err)
	}
}

// TestScriptsRunAsFunctions: where the server has Redis Functions, both drivers load the
// library once and FCALL it, with no EVALSHA; a server that lost the library (FUNCTION FLUSH,
// as after a restart without persistence) is given it again by the next call.
func TestScriptsRunAsFunctions(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			do(t, srv.Addr, "FUNCTION", "FLUSH")
			do(t, srv.Addr, "CONFIG", "RESETSTAT")
			s := mk(t, srv.Addr)
			for i := range 3 {
				pairOn(t, s, "fn:"+name+strconv.Itoa(i))
			}
			got := calls(t, srv.Addr, "fcall", "evalsha", "eval", "function|load")
			if got["fcall"] != 6 || got["evalsha"] != 0 || got["eval"] != 0 || got["function|load"] != 1 {
				t.Fatalf("three pairs ran %v; want 6 FCALLs, 1 FUNCTION LOAD and no EVALSHA or EVAL", got)
			}
			do(t, srv.Addr, "FUNCTION", "FLUSH")
			pairOn(t, s, "fn:"+name+"after-flush")
			got = calls(t, srv.Addr, "fcall", "evalsha", "function|load")
			if got["function|load"] != 2 || got["evalsha"] != 0 {
				t.Fatalf("after FUNCTION FLUSH: %v; want the library loaded again and no EVALSHA", got)
			}
		})
	}
}

// TestScriptsFallBackWhereFunctionsAreRefused: a user whose ACL allows EVALSHA but not FUNCTION
// LOAD (the ACL documented before functions) runs the scripts by EVALSHA on both drivers, and
// sends FUNCTION LOAD once only; one allowed FCALL and FUNCTION LOAD too uses functions.
func TestScriptsFallBackWhereFunctionsAreRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	aclUsers(t, srv.Addr)
	stores := userStores(srv.Addr)
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			do(t, srv.Addr, "FUNCTION", "FLUSH")
			do(t, srv.Addr, "CONFIG", "RESETSTAT")
			s := mk(t, "old")
			for i := range 3 {
				pairOn(t, s, "leasehold:fb:"+name+strconv.Itoa(i))
			}
			got := calls(t, srv.Addr, "fcall", "evalsha")
			if got["fcall"] != 0 || got["evalsha"] != 6 {
				t.Fatalf("three pairs without the right to load functions ran %v; want 6 EVALSHAs and no FCALL", got)
			}
			info, _ := redistest.Do(srv.Addr, "INFO", "commandstats")
			_, load, _ := strings.Cut(info, "cmdstat_function|load:")
			if load, _, _ = strings.Cut(load, "\n"); !strings.HasPrefix(load, "calls=0,") || !strings.Contains(load, ",rejected_calls=1,") {
				t.Fatalf("FUNCTION LOAD %q; want it refused once, then not sent again", load)
			}
			do(t, srv.Addr, "CONFIG", "RESETSTAT")
			pairOn(t, mk(t, "new"), "leasehold:fb:"+name+"new")
			if got := calls(t, srv.Addr, "fcall", "evalsha"); got["fcall"] != 2 || got["evalsha"] != 0 {
				t.Fatalf("a user allowed functions ran %v; want 2 FCALLs", got)
			}
		})
	}
}

// aclUsers adds to the server at addr the users "old", with exactly the documented ACL (no
// functions: the scripts go by EVALSHA), and "new", with FCALL and FUNCTION LOAD besides; both
// with the password userStores uses.
func aclUsers(t *testing.T, addr string) {
	t.Helper()
	do(t, addr, append([]string{"ACL", "SETUSER", "old"}, strings.Fields(ACLRules)...)...)
	do(t, addr, append(append([]string{"ACL", "SETUSER", "new"}, strings.Fields(ACLRules)...), "+fcall", "+function|load")...)
}

// userStores makes Stores of each driver that log in as a given user (password "secret").
func userStores(addr string) map[string]func(t *testing.T, user string) redisharness.Store {
	return map[string]func(t *testing.T, user string) redisharness.Store{
		"goredis": func(t *testing.T, user string) redisharness.Store {
			c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: "secret"})
			s, err := goredis.New(c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(); c.Close() })
			return s
		},
		"valkey": func(t *testing.T, user string) redisharness.Store {
			c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, Username: user, Password: "secret", DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			s, err := valkey.New(c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(); c.Close() })
			return s
		},
	}
}

// TestLibraryPreludeStateIsSetByBegin: in a Functions library the Lua state persists between
// calls, so every variable the prelude (common.lua, guard.lua) declares at the top level, outside
// a function, must be set by begin on every call; else one call's state leaks into the next.
func TestLibraryPreludeStateIsSetByBegin(t *testing.T) {
	lib := rediscore.Library
	lib = lib[:strings.Index(lib, "local function acquire_fast(")] // the prelude and guard
	beginAt := strings.Index(lib, "local function begin(")
	if beginAt < 0 {
		t.Fatal("no begin in the library")
	}
	beginEnd := strings.Index(lib[beginAt:], "\nend\n")
	begin := lib[beginAt : beginAt+beginEnd]
	assigned := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*([A-Za-z_][A-Za-z_0-9, ]*?)\s*=[^=]`).FindAllStringSubmatch(begin, -1) {
		for _, name := range strings.Split(m[1], ",") {
			assigned[strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), "local "))] = true
		}
	}
	// Top-level declarations: lines starting at column 0 with "local " but not "local function".
	decl := regexp.MustCompile(`(?m)^local ([A-Za-z_][A-Za-z_0-9, ]*)`)
	for _, m := range decl.FindAllStringSubmatch(lib, -1) {
		if strings.HasPrefix(m[1], "function") {
			continue
		}
		for _, name := range strings.Split(m[1], ",") {
			name = strings.TrimSpace(name)
			if name != "" && !assigned[name] {
				t.Errorf("top-level variable %q of the library is not set by begin: it keeps its value from one FCALL to the next", name)
			}
		}
	}
}

// TestFunctionCallsDoNotShareState: calls on several keys, watched and not, interleaved with
// calls that fail midway (WRONGTYPE), each tell exactly their own key's watchers: a watched
// key's change is heard after a call on another key told its own watchers or failed, and an
// unwatched key's change publishes nothing after a watched key's did.
func TestFunctionCallsDoNotShareState(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := mk(t, srv.Addr)
			wa := reliableWatch(t, s, "leak:"+name+":a")
			wb := reliableWatch(t, s, "leak:"+name+":b")
			bad := "leak:" + name + ":bad"
			if _, err := redistest.Do(srv.Addr, "SET", rediscore.Keys(bad)[0], "theirs"); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				for _, key := range []string{"a", "b"} {
					key = "leak:" + name + ":" + key
					res := mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}, true)
					if _, err := s.Acquire(ctx, core.AcquireRequest{Key: bad, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err == nil || !strings.Contains(err.Error(), rediscore.Keys(bad)[0]) {
						t.Fatalf("acquire on a foreign key: %v; want WRONGTYPE naming it", err)
					}
					before := publishes(t, srv.Addr)
					mustAcquire(t, s, core.AcquireRequest{Key: "leak:" + name + ":quiet" + strconv.Itoa(i) + key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}, true)
					if after := publishes(t, srv.Addr); after != before {
						t.Fatalf("a grant on an unwatched key published %d times", after-before)
					}
					if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: res.Fence}); err != nil || !ok {
						t.Fatalf("release: %v, %v", ok, err)
					}
				}
				if !heard(wa) || !heard(wb) {
					t.Fatalf("round %d: a watched key's changes were not heard", i)
				}
			}
		})
	}
}

// TestFirstCallsRaceToLoad: many goroutines make a new Store's first calls at once.
func TestFirstCallsRaceToLoad(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			do(t, srv.Addr, "FUNCTION", "FLUSH")
			s := mk(t, srv.Addr)
			var wg sync.WaitGroup
			for i := range 64 {
				wg.Go(func() { pairOn(t, s, fmt.Sprint("race:", name, i)) })
			}
			wg.Wait()
		})
	}
}

// TestStoreWorksWhileTheLibraryIsFlushedRepeatedly: while another client keeps flushing the
// server's functions, every call succeeds.
func TestStoreWorksWhileTheLibraryIsFlushedRepeatedly(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t, srv.Addr)
			ctx, cancel := context.WithCancel(context.Background())
			var flushes atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				for ctx.Err() == nil {
					if _, err := redistest.Do(srv.Addr, "FUNCTION", "FLUSH"); err == nil {
						flushes.Add(1)
					}
				}
			}()
			var wg sync.WaitGroup
			var failed atomic.Value
			rounds := testenv.Pick(50, 200)
			for g := range 8 {
				wg.Go(func() {
					for i := 0; i < rounds && failed.Load() == nil; i++ {
						key := fmt.Sprint("flush:", name, g)
						res, err := s.Acquire(context.Background(), core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
						if err == nil && res.Granted {
							_, err = s.Release(context.Background(), core.ReleaseRequest{Key: key, Holder: "h", Fence: res.Fence})
						} else if err == nil {
							err = fmt.Errorf("not granted: %+v", res)
						}
						if err != nil {
							failed.Store(err)
						}
					}
				})
			}
			wg.Wait()
			cancel()
			<-done
			if err, _ := failed.Load().(error); err != nil {
				t.Fatalf("with the library flushed %d times: %v", flushes.Load(), err)
			}
		})
	}
}

// TestFunctionsRefusedAfterLoad: a user allowed FUNCTION LOAD but not FCALL, from the start or
// once the library is loaded (an ACL changed mid-life), still runs its scripts (by EVALSHA).
func TestFunctionsRefusedAfterLoad(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for name, mk := range userStores(srv.Addr) {
		t.Run(name, func(t *testing.T) {
			do(t, srv.Addr, "FUNCTION", "FLUSH")
			do(t, srv.Addr, append(append([]string{"ACL", "SETUSER", "loadonly"}, strings.Fields(ACLRules)...), "+function|load")...)
			pairOn(t, mk(t, "loadonly"), "leasehold:noperm:"+name+"start")

			do(t, srv.Addr, append(append([]string{"ACL", "SETUSER", "later"}, strings.Fields(ACLRules)...), "+fcall", "+function|load")...)
			s := mk(t, "later")
			pairOn(t, s, "leasehold:noperm:"+name+"a")
			do(t, srv.Addr, "ACL", "SETUSER", "later", "-fcall")
			for i := range 3 {
				pairOn(t, s, "leasehold:noperm:"+name+strconv.Itoa(i))
			}
		})
	}
}

// TestMiniredisWithoutFunctions: miniredis has no FUNCTION command; both drivers still work.
func TestMiniredisWithoutFunctions(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t, m.Addr())
			for i := range 3 {
				pairOn(t, s, fmt.Sprint("mini:", name, i))
			}
		})
	}
}

// TestHolderReleasesWhenOutOfMemory: with maxmemory full (noeviction), a holder still releases
// (and the line's head is granted), a waiter still leaves, and Inspect still reads; a new
// Acquire is refused with OOM.
func TestHolderReleasesWhenOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "0")
			s := mk(t, srv.Addr)
			key := "oom:" + name
			res := mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}, true)
			reqB := core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
			mustAcquire(t, s, reqB, false)
			reqC := reqB
			reqC.Holder = "c"
			mustAcquire(t, s, reqC, false)
			wc, err := s.Register(ctx, reqC)
			if err != nil {
				t.Fatal(err)
			}
			do(t, srv.Addr, "CONFIG", "SET", "maxmemory-policy", "noeviction")
			do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "1")
			t.Cleanup(func() { redistest.Do(srv.Addr, "CONFIG", "SET", "maxmemory", "0") })
			if _, err := s.Acquire(ctx, core.AcquireRequest{Key: "oom:other" + name, Holder: "x", Permits: 1, Limit: 1, TTL: time.Minute}); err == nil || !strings.Contains(err.Error(), "OOM") {
				t.Fatalf("acquire when out of memory: %v; want OOM", err)
			}
			snap, err := s.Inspect(ctx, key)
			if err != nil || len(snap.Leases) != 1 || len(snap.Waiters) != 2 {
				t.Fatalf("inspect when out of memory: %+v, %v", snap, err)
			}
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: res.Fence}); err != nil || !ok {
				t.Fatalf("release when out of memory: %v, %v", ok, err)
			}
			if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "b" {
				t.Fatalf("after release when out of memory: %+v, %v; want b granted by the line", snap, err)
			}
			wc.Close() // c leaves the line
			poll.Until(t, "c's place left", func() bool { return lineLen(t, srv.Addr, key) == 0 })
		})
	}
}

// TestLibraryLoadsOnThisServer: FUNCTION LOAD of Library is accepted as is, with its flags.
func TestLibraryLoadsOnThisServer(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	reply, err := redistest.Do(srv.Addr, "FUNCTION", "LOAD", rediscore.Library)
	if err != nil || strings.HasPrefix(reply, "-") {
		t.Fatalf("FUNCTION LOAD: %q, %v", reply, err)
	}
	flags := map[string]string{}
	for _, lib := range libraries(t, srv.Addr) {
		for _, f := range lib.Functions {
			flags[strings.TrimPrefix(f.Name, rediscore.LibraryName+"_")] = strings.Join(f.Flags, ",")
		}
	}
	v := fmt.Sprintf("v%d_", rediscore.LayoutVersion)
	want := map[string]string{v + "acquire": "", v + "extend": "", v + "release": "allow-oom", v + "inspect": "no-writes", v + "leave": "allow-oom",
		v + "watch": "", "layout": "no-writes"}
	if fmt.Sprint(flags) != fmt.Sprint(want) {
		t.Fatalf("functions and flags %v; want %v", flags, want)
	}
}

// libraries returns the server's function libraries.
func libraries(t *testing.T, addr string) []redis.Library {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	libs, err := c.FunctionList(context.Background(), redis.FunctionListQuery{}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return libs
}

// TestErrorNamingAKeyLikeAMissingFunction: a WRONGTYPE error whose key reads "Function not
// found" is the script's own error: it is returned after one FCALL, without loading the library
// again and running the script twice more.
func TestErrorNamingAKeyLikeAMissingFunction(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t, srv.Addr)
			pairOn(t, s, "warm:"+name)
			key := name + " Function not found"
			if _, err := redistest.Do(srv.Addr, "SET", rediscore.Keys(key)[0], "theirs"); err != nil {
				t.Fatal(err)
			}
			do(t, srv.Addr, "CONFIG", "RESETSTAT")
			_, err := s.Acquire(context.Background(), core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), rediscore.Keys(key)[0]) {
				t.Fatalf("acquire: %v; want WRONGTYPE naming the key", err)
			}
			if got := calls(t, srv.Addr, "fcall", "evalsha", "eval", "function|load"); got["fcall"] != 1 || got["evalsha"]+got["eval"]+got["function|load"] != 0 {
				t.Fatalf("one failing acquire ran %v; want one FCALL", got)
			}
		})
	}
}

package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

func TestBadRedisFlagsAreUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the one line on stderr
	}{
		{[]string{"run", "-key", "k", "--", "true"}, "leasehold run: -redis or -postgres is required"},
		{[]string{"run", "-redis", "redis://127.0.0.1:port", "-key", "k", "--", "true"}, `leasehold run: -redis "redis://127.0.0.1:port": `},
		{[]string{"run", "-redis", "127.0.0.1:", "-key", "k", "--", "true"}, `leasehold run: -redis "127.0.0.1:": neither a URL`},
		{[]string{"run", "-redis", "http://127.0.0.1:6379", "-key", "k", "--", "true"}, `leasehold run: -redis "http://127.0.0.1:6379": `},
		{[]string{"run", "-redis", "a b:6379", "-key", "k", "--", "true"}, `leasehold run: -redis "a b:6379": neither a URL`},
		{[]string{"run", "-redis", "127.0.0.1:6379", "-driver", "jedis", "-key", "k", "--", "true"}, `leasehold run: -driver "jedis": must be goredis or valkey`},
		{[]string{"run", "-redis", "127.0.0.1:6379", "-driver", "valkey", "-redis", "ftp://x", "-key", "k", "--", "true"}, `leasehold run: -redis "ftp://x": valkey: invalid URL scheme`},
		{[]string{"run", "-redis", "127.0.0.1:6379", "-prefix", "a{b}:", "-key", "k", "--", "true"}, `leasehold run: -prefix "a{b}:": must not contain`},
		{[]string{"run", "-redis", "127.0.0.1:6379", "-redis", "redis://127.0.0.1:6379/0", "-key", "k", "--", "true"}, `leasehold run: -redis "127.0.0.1:6379" and -redis "redis://127.0.0.1:6379/0": the same server twice`},
		{[]string{"run", "-redis", "127.0.0.1:6379", "-key", "k", "echo", "hi"}, `leasehold run: unexpected argument "echo": the command goes after "--", as in leasehold run [flags] -- echo hi`},
		{[]string{"run", "-redis", "127.0.0.1:6379", "-key", "k"}, "leasehold run: no command given after --"},
		{[]string{"inspect", "-redis", "127.0.0.1:6379"}, "leasehold inspect: KEY is required"},
		{[]string{"inspect", "-redis"}, "leasehold inspect: flag needs an argument: -redis"},
		{[]string{"inspect", "k"}, "leasehold inspect: -redis or -postgres is required"},
		{[]string{"inspect", "k", "-redis", "127.0.0.1:6379", "j"}, `leasehold inspect: unexpected argument "j": one KEY only`},
		{[]string{"inspect", "-redis", "redis://:x", "k"}, `leasehold inspect: -redis "redis://:x": `},
		{[]string{"inspect", "-limit", "-1", "-redis", "127.0.0.1:6379", "k"}, "leasehold inspect: -limit -1: must not be negative"},
		{[]string{"run", "-redis", "redis://:::", "-key", "k", "--", "true"}, `leasehold run: -redis "redis://:::": not a host:port (an IPv6 address goes in brackets, as in redis://[::1]:6379)`},
		{[]string{"inspect", "-redis", "rediss://u:p@::1/0", "k"}, `leasehold inspect: -redis "rediss://u:p@::1/0": not a host:port`},
		{[]string{"run", "-redis", "redis://127.0.0.1:", "-key", "k", "--", "true"}, `leasehold run: -redis "redis://127.0.0.1:": no port after ':'`},
	}
	checkUsageErrors(t, tests)
}

// TestEmptyPrefixesAreUsageErrors: an empty -prefix would put the keys at the database's root,
// and an empty -pg-schema or -pg-prefix names nothing; each is refused as bad usage, whichever
// store is given and whichever command.
func TestEmptyPrefixesAreUsageErrors(t *testing.T) {
	const (
		prefix   = `-prefix "": must not be empty`
		pgSchema = `-pg-schema "": must not be empty`
		pgPrefix = `-pg-prefix "": must not be empty`
	)
	checkUsageErrors(t, []struct {
		args []string
		want string
	}{
		{[]string{"run", "-redis", "127.0.0.1:6379", "-prefix", "", "-key", "k", "--", "true"}, "leasehold run: " + prefix},
		{[]string{"run", "-redis", "127.0.0.1:6379", "-prefix=", "-driver", "valkey", "-key", "k", "--", "true"}, "leasehold run: " + prefix},
		{[]string{"inspect", "-redis", "127.0.0.1:6379", "-prefix", "", "k"}, "leasehold inspect: " + prefix},
		{[]string{"elect", "-redis", "127.0.0.1:6379", "-prefix", "", "k", "v", "--", "true"}, "leasehold elect: " + prefix},
		{[]string{"elect", "-redis", "127.0.0.1:6379", "-prefix", "", "-observe", "k"}, "leasehold elect: " + prefix},
		{[]string{"run", "-postgres", "postgres://h/db", "-prefix", "", "-key", "k", "--", "true"}, "leasehold run: " + prefix},
		{[]string{"run", "-postgres", "postgres://h/db", "-pg-schema", "", "-key", "k", "--", "true"}, "leasehold run: " + pgSchema},
		{[]string{"inspect", "-postgres", "postgres://h/db", "-pg-prefix", "", "k"}, "leasehold inspect: " + pgPrefix},
		{[]string{"elect", "-postgres", "postgres://h/db", "-pg-prefix", "", "-observe", "k"}, "leasehold elect: " + pgPrefix},
		{[]string{"run", "-redis", "127.0.0.1:6379", "-pg-prefix", "", "-key", "k", "--", "true"}, "leasehold run: " + pgPrefix},
	})
}

func TestRedisTakesHostPort(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for _, driver := range []string{"goredis", "valkey"} {
		code, out, errOut := runArgs(t, t.Context(), "run", "-redis", srv.Addr, "-driver", driver, "-key", "hostport", "--", "true")
		if code != exitOK || out != "" || errOut != "" {
			t.Errorf("run -redis %s -driver %s: exit %d, stdout %q, stderr %q; want %d and nothing printed", srv.Addr, driver, code, out, errOut, exitOK)
		}
		code, out, errOut = runArgs(t, t.Context(), "inspect", "-redis", srv.Addr, "-driver", driver, "hostport")
		if code != exitOK || !strings.HasPrefix(out, "hostport: 0 holder(s), 0 permit(s) in use; no limit: nobody holds or waits for it\n") || errOut != "" {
			t.Errorf("inspect -redis %s -driver %s: exit %d, stdout %q, stderr %q", srv.Addr, driver, code, out, errOut)
		}
	}
}

func TestInspectCountsAgainstTheKeysLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { client.Close() })
	store, err := goredis.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	sem, err := primitives.NewSemaphore(store, "gpu", 4, primitives.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := sem.Acquire(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Release(context.Background()) })

	url := "redis://" + srv.Addr
	for _, args := range [][]string{
		{"inspect", "-redis", url, "gpu"},
		{"inspect", "gpu", "-redis", url},
		{"inspect", "-redis", url, "--", "gpu"},
	} {
		code, out, errOut := runArgs(t, t.Context(), args...)
		if code != exitOK || errOut != "" || !strings.HasPrefix(out, "gpu: 1 holder(s), 1 permit(s) in use, 3 free of 4\n") ||
			!strings.Contains(out, lease.Holder()) || !strings.Contains(out, fmt.Sprint(lease.Fence())) {
			t.Errorf("%q: exit %d, stderr %q, stdout:\n%s\nwant 3 free of 4 and the holder with its fence", args, code, errOut, out)
		}
	}
	code, out, _ := runArgs(t, t.Context(), "inspect", "-limit", "2", "-redis", url, "gpu")
	if code != exitOK || !strings.HasPrefix(out, "gpu: 1 holder(s), 1 permit(s) in use, 3 free of 4 (limit 4; -limit 2 is refused)\n") {
		t.Errorf("-limit 2: exit %d, stdout:\n%s", code, out)
	}
	code, out, _ = runArgs(t, t.Context(), "inspect", "-redis", url, "never-used")
	if code != exitOK || !strings.HasPrefix(out, "never-used: 0 holder(s), 0 permit(s) in use; no limit: nobody holds or waits for it") {
		t.Errorf("a key never used: exit %d, stdout:\n%s", code, out)
	}
	code, out, _ = runArgs(t, t.Context(), "inspect", "-redis", url, "-limit", "2", "never-used")
	if code != exitOK || !strings.HasPrefix(out, "never-used: 0 holder(s), 0 permit(s) in use, 2 free of 2\n") {
		t.Errorf("-limit 2 on a key never used: exit %d, stdout:\n%s", code, out)
	}
}

// inspectFromRun returns a command line for `leasehold run` whose command runs, while the
// lease is held, `leasehold inspect` once with each of the argument lists.
func inspectFromRun(runArgs []string, inspects ...[]string) []string {
	script := ""
	for _, a := range inspects {
		script += `"$0" inspect ` + strings.Join(a, " ") + "; "
	}
	return append(append(runArgs, "--", "sh", "-c", script), os.Args[0])
}

func TestPrefixAndDriverReachTheSameLease(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	args := inspectFromRun([]string{"run", "-redis", url, "-driver", "valkey", "-prefix", "p:", "-key", "job"},
		[]string{"-redis", url, "-driver", "valkey", "-prefix", "p:", "job"},
		[]string{"-redis", url, "-prefix", "p:", "job"},
		[]string{"-redis", url, "-driver", "valkey", "job"},
		[]string{"-redis", url, "job"},
	)
	out, err := cli(t.Context(), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%q: %v\n%s", args, err, out)
	}
	lines := []string{}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "job: ") {
			lines = append(lines, l)
		}
	}
	want := []string{
		"job: 1 holder(s), 1 permit(s) in use, 0 free of 1", // the same driver and prefix
		"job: 1 holder(s), 1 permit(s) in use, 0 free of 1", // the other driver, the same prefix
		"job: 0 holder(s), 0 permit(s) in use; no limit: nobody holds or waits for it",
		"job: 0 holder(s), 0 permit(s) in use; no limit: nobody holds or waits for it",
	}
	if len(lines) != len(want) {
		t.Fatalf("inspect lines %q, want %d:\n%s", lines, len(want), out)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("inspect %d: %q, want %q\n%s", i+1, lines[i], want[i], out)
		}
	}
}

func TestRedlockGoesOnWithAQuorum(t *testing.T) {
	testenv.SkipShort(t, "stops servers, and waits out the drivers' retries of them")
	t.Parallel()
	servers := []*redistest.Server{redistest.StartServer(t), redistest.StartServer(t), redistest.StartServer(t)}
	var redisFlags []string
	for _, s := range servers {
		redisFlags = append(redisFlags, "-redis", s.Addr)
	}
	servers[2].Close()
	down := "redis " + servers[2].Addr + " unreachable"

	args := inspectFromRun(append([]string{"run", "-key", "quorum"}, redisFlags...), append(redisFlags, "quorum"))
	cmd := cli(t.Context(), args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("run over 2 of 3 servers: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "quorum: 1 holder(s), 1 permit(s) in use, 0 free of 1\n") {
		t.Errorf("inspect under the lease, over 2 of 3 servers:\n%s", stdout.String())
	}
	// One line from run, one from the inspect it ran.
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "leasehold run: "+down) || !strings.HasPrefix(lines[1], "leasehold inspect: "+down) ||
		!strings.Contains(lines[0], "going on without it: 2 of 3 answer, Redlock needs 2") {
		t.Errorf("stderr %q, want a line from run and one from inspect naming %s", lines, servers[2].Addr)
	}

	code, _, errOut := runArgs(t, t.Context(), append(append([]string{"run", "-key", "quorum", "-driver", "valkey"}, redisFlags...), "--", "true")...)
	if code != exitOK || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "leasehold run: "+down) {
		t.Errorf("-driver valkey over 2 of 3 servers: exit %d, stderr %q; want %d and one line naming %s", code, errOut, exitOK, servers[2].Addr)
	}

	// A semaphore of limit 2 over 3 servers needs all three.
	code, _, errOut = runArgs(t, t.Context(), append(append([]string{"run", "-key", "sem", "-limit", "2"}, redisFlags...), "--", "true")...)
	if code != exitFail || !strings.Contains(errOut, "only 2 of 3 Redis servers answer; Redlock needs 3 for -limit 2") {
		t.Errorf("-limit 2 over 2 of 3 servers: exit %d, stderr %q; want %d and a clear error", code, errOut, exitFail)
	}

	servers[1].Close()
	for _, args := range [][]string{
		append(append([]string{"run", "-key", "quorum"}, redisFlags...), "--", "true"),
		append(append([]string{"inspect"}, redisFlags...), "quorum"),
	} {
		code, out, errOut := runArgs(t, t.Context(), args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != exitFail || out != "" || len(lines) != 3 ||
			!strings.Contains(lines[0], "redis "+servers[1].Addr+" unreachable") || !strings.Contains(lines[0], "too few answer") ||
			!strings.Contains(lines[1], down) ||
			lines[2] != "leasehold "+args[0]+": only 1 of 3 Redis servers answer; Redlock needs 2 (a majority)" {
			t.Errorf("%s over 1 of 3 servers: exit %d, stdout %q, stderr:\n%s\nwant %d, the two down servers and a clear error", args[0], code, out, errOut, exitFail)
		}
	}
}

func TestRedisCommandsHelp(t *testing.T) {
	for _, cmd := range []string{"run", "inspect"} {
		code, out, errOut := runArgs(t, context.Background(), cmd, "--help")
		if code != exitOK || errOut != "" {
			t.Errorf("%s --help: exit %d, stderr %q", cmd, code, errOut)
		}
		for _, want := range []string{"Usage: leasehold " + cmd, "-redis URL", "host:port", "Redlock", "quorum",
			"-driver string", "goredis", "valkey", "-prefix string", `(default "leasehold:")`} {
			if !strings.Contains(out, want) {
				t.Errorf("%s --help does not say %q:\n%s", cmd, want, out)
			}
		}
	}
}

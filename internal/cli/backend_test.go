package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// fakeBackend is a Backend named "fake", with a flag of its own (-fake-prefix), over a memory
// store. It records what Open was given. It is safe for concurrent use.
type fakeBackend struct {
	store *memory.Store
	fail  error // when not nil, Open returns it

	mu      sync.Mutex
	opened  [][]string // the endpoints of each Open
	prefix  string     // the -fake-prefix of the last Open
	closes  int
	timeout bool // every Open's ctx had a deadline
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{store: memory.New(), timeout: true}
}

// backend returns the Backend; its -fake-prefix is bound to the command line being parsed.
func (f *fakeBackend) backend() Backend {
	var prefix string
	return Backend{
		Name:  "fake",
		Usage: "the fake store: an endpoint `URL`",
		Flags: func(fs *flag.FlagSet) {
			fs.Func("fake-prefix", "prefix of the fake store's keys (not empty; default \"p/\")", func(s string) error {
				if s == "" {
					return errors.New("must not be empty")
				}
				prefix = s
				return nil
			})
		},
		Check: func(endpoints []string) error {
			for _, e := range endpoints {
				if strings.Contains(e, " ") {
					return fmt.Errorf("-fake %q: a space in an endpoint", e)
				}
				if e == "bad" {
					return errors.New("bad endpoint")
				}
			}
			return nil
		},
		Open: func(ctx context.Context, endpoints []string) (core.Store, func() error, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.opened = append(f.opened, endpoints)
			f.prefix = prefix
			_, ok := ctx.Deadline()
			f.timeout = f.timeout && ok
			if f.fail != nil {
				return nil, nil, f.fail
			}
			return f.store, func() error {
				f.mu.Lock()
				defer f.mu.Unlock()
				f.closes++
				return nil
			}, nil
		},
	}
}

// runWith runs the command line args with backends and returns its exit status, stdout and stderr.
func runWith(t *testing.T, backends []Backend, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut strings.Builder
	code := run(t.Context(), args, &out, &errOut, backends...)
	return code, out.String(), errOut.String()
}

// TestBackendIsAStoreOfRunInspectAndElect: a Backend given to Main is a store of run, inspect and
// elect: -fake takes several endpoints, repeated or comma-separated, which Open gets in order with
// the backend's own flags and a deadline, and the store is closed as the command exits.
func TestBackendIsAStoreOfRunInspectAndElect(t *testing.T) {
	t.Parallel()
	f := newFakeBackend()
	b := []Backend{f.backend()}
	endpoints := []string{"-fake", "http://a:2379, http://b:2379", "-fake", "c:2379", "-fake-prefix", "team/"}

	code, _, errOut := runWith(t, b, append(append([]string{"run"}, endpoints...), "-key", "k", "--", "sh", "-c", `test "$LEASEHOLD_FENCE" -gt 0`)...)
	if code != exitOK || errOut != "" {
		t.Fatalf("run: exit %d, stderr %q; want %d", code, errOut, exitOK)
	}
	f.mu.Lock()
	opened, prefix, closes, timeout := slices.Clone(f.opened), f.prefix, f.closes, f.timeout
	f.mu.Unlock()
	want := []string{"http://a:2379", "http://b:2379", "c:2379"}
	if len(opened) != 1 || !slices.Equal(opened[0], want) || prefix != "team/" || closes != 1 || !timeout {
		t.Errorf("Open got %q, -fake-prefix %q, a deadline %v; closed %d times; want %q, \"team/\", a deadline, closed once",
			opened, prefix, timeout, closes, want)
	}

	m, err := primitives.NewMutex(f.store, "held")
	if err != nil {
		t.Fatal(err)
	}
	lease, err := m.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	code, out, errOut := runWith(t, b, append(append([]string{"inspect"}, endpoints...), "held")...)
	if code != exitOK || !strings.Contains(out, lease.Holder()) || !strings.Contains(out, "no one waiting") {
		t.Errorf("inspect: exit %d, stdout %q, stderr %q; want %d and the holder %s", code, out, errOut, exitOK, lease.Holder())
	}
	code, _, errOut = runWith(t, b, append(append([]string{"elect"}, endpoints...), "-n", "held", "v", "--", "true")...)
	if code != exitBusy || !strings.Contains(errOut, `"held" has a leader`) {
		t.Errorf("elect on a held key: exit %d, stderr %q; want %d", code, errOut, exitBusy)
	}
}

// TestBackendRunsUnderMain: the test binary as a leasehold built with a Backend (Main(backend), as
// backend/etcd/cmd/leasehold is) runs a command under a lease on it, through the supervisor it
// re-executes, and its help names the backend's flags.
func TestBackendRunsUnderMain(t *testing.T) {
	t.Parallel()
	cmd := cli(t.Context(), "run", "-fake", "a:1", "-key", "k", "--", "sh", "-c", `echo "fence $LEASEHOLD_FENCE"`)
	cmd.Env = append(cmd.Env, "LEASEHOLD_AS_CLI=fake")
	out, err := cmd.CombinedOutput()
	if err != nil || !regexp.MustCompile(`^fence [1-9][0-9]*\n$`).Match(out) {
		t.Errorf("run -fake: %v, output %q; want exit 0 and the fence", err, out)
	}
	cmd = cli(t.Context(), "--help")
	cmd.Env = append(cmd.Env, "LEASEHOLD_AS_CLI=fake")
	out, err = cmd.Output()
	if err != nil || !strings.Contains(string(out), "-fake URL") || strings.Contains(string(out), etcdInstall) {
		t.Errorf("--help: %v, output:\n%s\nwant -fake URL and no word of the etcd build", err, out)
	}
}

// TestBackendFlagsInHelp: a Backend's flags are in the commands' usage lines and flag lists, and in
// the tool's help in place of where to find the etcd build.
func TestBackendFlagsInHelp(t *testing.T) {
	b := []Backend{newFakeBackend().backend()}
	for _, cmd := range []string{"run", "inspect", "elect"} {
		code, out, errOut := runWith(t, b, cmd, "--help")
		if code != exitOK || errOut != "" {
			t.Errorf("%s --help: exit %d, stderr %q", cmd, code, errOut)
		}
		for _, want := range []string{"Usage: leasehold " + cmd + " -redis URL|-postgres URL|-fake URL ",
			"-fake URL\n", "the fake store: an endpoint URL", "several endpoints of one store: repeat -fake, or separate URLs with commas",
			"-fake-prefix value", "-redis URL", "-postgres URL"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s --help does not say %q:\n%s", cmd, want, out)
			}
		}
	}
	code, out, _ := runWith(t, b, "--help")
	for _, want := range []string{"Redlock,\nPostgreSQL, fake).", "pooler).\n\nThis build also takes -fake URL instead (several endpoints of one store:\nrepeated, or separated by commas), with -fake-prefix.\n\nRun"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("--help: exit %d, does not say %q:\n%s", code, want, out)
		}
	}
	if strings.Contains(out, etcdInstall) {
		t.Errorf("--help of a build with a Backend says where the etcd build is:\n%s", out)
	}
	_, out, _ = runArgs(t, context.Background(), "--help")
	if !strings.Contains(out, etcdInstall) {
		t.Errorf("--help without Backends does not say where the etcd build is:\n%s", out)
	}
}

// TestBadBackendCommandLinesAreUsageErrors: one store per command line, named in the error with
// the other; an endpoint that is empty or given twice; a bad value of the backend's own flag; the
// backend's Check error. Nothing is opened.
func TestBadBackendCommandLinesAreUsageErrors(t *testing.T) {
	f := newFakeBackend()
	b := []Backend{f.backend()}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-fake", "a:1", "-redis", "127.0.0.1:6379", "-key", "k", "--", "true"}, "leasehold run: -redis and -fake: give one store, not both"},
		{[]string{"inspect", "-postgres", "postgres://h/db", "-fake", "a:1", "k"}, "leasehold inspect: -postgres and -fake: give one store, not both"},
		{[]string{"elect", "-fake-prefix", "x", "-observe", "k"}, "leasehold elect: -redis, -postgres or -fake is required"},
		{[]string{"run", "-fake", "a:1,", "-key", "k", "--", "true"}, `leasehold run: invalid value "a:1," for flag -fake: an empty endpoint`},
		{[]string{"run", "-fake", "a:1", "-fake", "a:1", "-key", "k", "--", "true"}, `leasehold run: invalid value "a:1" for flag -fake: endpoint "a:1" given twice`},
		{[]string{"inspect", "-fake", "a:1", "-fake-prefix=", "k"}, `leasehold inspect: invalid value "" for flag -fake-prefix: must not be empty`},
		{[]string{"inspect", "-redis", "127.0.0.1:6379", "-fake-prefix=", "k"}, `leasehold inspect: invalid value "" for flag -fake-prefix: must not be empty`},
		{[]string{"inspect", "-fake", "a b", "k"}, `leasehold inspect: -fake "a b": a space in an endpoint`},
		{[]string{"inspect", "-fake", "a:1,bad", "k"}, `leasehold inspect: -fake: bad endpoint`},
	} {
		code, out, errOut := runWith(t, b, tc.args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, tc.want) || !strings.Contains(errOut, "--help") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and one line starting %q with a hint to --help", tc.args, code, out, errOut, exitUsage, tc.want)
		}
	}
	if len(f.opened) != 0 {
		t.Errorf("Open called for a bad command line: %q", f.opened)
	}
}

// TestWithoutTheEtcdDriverEtcdSaysWhereItIs: this module's leasehold, given -etcd or a flag of
// the etcd build's, exits 2 with one line: it has no etcd driver, and the command that installs
// the leasehold that has. The command that takes no store just does not know the flag.
func TestWithoutTheEtcdDriverEtcdSaysWhereItIs(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"run", "-etcd", "http://127.0.0.1:2379", "-key", "k", "--", "true"},
		{"run", "-key", "k", "--etcd=127.0.0.1:2379,127.0.0.1:22379", "--", "true"},
		{"inspect", "-etcd", "127.0.0.1:2379", "k"},
		{"elect", "-etcd-prefix", "team/", "-etcd", "127.0.0.1:2379", "-observe", "k"},
	} {
		code, out, errOut := runArgs(t, t.Context(), args...)
		want := fmt.Sprintf("leasehold %s: -etcd", args[0])
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, want) || !strings.Contains(errOut, "has no etcd driver") ||
			!strings.HasSuffix(errOut, ": "+etcdInstall+"\n") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and one line starting %q that gives %q", args, code, out, errOut, exitUsage, want, etcdInstall)
		}
	}
	code, _, errOut := runArgs(t, t.Context(), "demo", "-etcd", "x")
	if code != exitUsage || !strings.HasPrefix(errOut, "leasehold demo: flag provided but not defined: -etcd") {
		t.Errorf("demo -etcd: exit %d, stderr %q; want %d and an unknown flag", code, errOut, exitUsage)
	}
	// The binary itself, as installed.
	out, err := cli(t.Context(), "inspect", "-etcd", "127.0.0.1:2379", "k").CombinedOutput()
	var ee interface{ ExitCode() int }
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), etcdInstall) {
		t.Errorf("leasehold inspect -etcd: %v, output %q; want exit %d and %q", err, out, exitUsage, etcdInstall)
	}
}

// TestBackendFailuresSayWhatFailed: a Backend's store that Open cannot open is reported in one
// line, exit 1, that says what is at its endpoints: nothing (unreachable, one endpoint or every
// one), a Redis server, a server that says nothing; else Open's own words, with the endpoints
// that could not be dialled.
func TestBackendFailuresSayWhatFailed(t *testing.T) {
	t.Parallel()
	f := newFakeBackend()
	f.fail = errors.New("no answer within the deadline")
	b := []Backend{f.backend()}
	redisAddr := redistest.StartServer(t).Addr
	quiet, web := listen(t, silent), httpServer(t)
	tlsServer := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(tlsServer.Close)
	secure := tlsServer.Listener.Addr().String()
	var wg sync.WaitGroup
	for _, tc := range []struct {
		endpoints, want string
	}{
		{"127.0.0.1:1", "fake 127.0.0.1:1 unreachable: dial tcp 127.0.0.1:1: connect: connection refused"},
		{"http://127.0.0.1:1,unix:///nonexistent/sock", "fake unreachable: none of its 2 endpoints answers: 127.0.0.1:1 (dial tcp 127.0.0.1:1: connect: connection refused), /nonexistent/sock (dial unix /nonexistent/sock: connect: no such file or directory)"},
		{"http://127.0.0.1:1," + redisAddr, "fake " + redisAddr + ": not a fake server: it answers as a Redis server does (use -redis)"},
		{"http://" + quiet, "fake " + quiet + ": not a fake server, or a stalled one: it accepts connections but does not answer within 1s: no answer within the deadline"},
		{"http://" + web, "fake: no answer within the deadline"},
		{"https://" + web, "fake " + web + ": TLS handshake failed: the server speaks plain HTTP, not TLS (use http://, not https://)"},
		{"https://" + secure, "fake " + secure + ": TLS handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"},
		{"http://" + web + ",http://127.0.0.1:1", "fake: no answer within the deadline; unreachable: 127.0.0.1:1 (dial tcp 127.0.0.1:1: connect: connection refused)"},
		{"dns:///cluster.invalid", "fake: no answer within the deadline"},
	} {
		wg.Go(func() {
			code, out, errOut := runWith(t, b, "inspect", "-fake", tc.endpoints, "k")
			// A TLS handshake on a loaded machine, under the race detector, can outlast the
			// probe's second: what the message says of a handshake that ends is the check.
			for try := 0; try < 3 && strings.Contains(errOut, "no answer to the handshake within"); try++ {
				code, out, errOut = runWith(t, b, "inspect", "-fake", tc.endpoints, "k")
			}
			if code != exitFail || out != "" || errOut != "leasehold inspect: "+tc.want+"\n" {
				t.Errorf("-fake %s: exit %d, stdout %q, stderr %q\nwant %d and %q", tc.endpoints, code, out, errOut, exitFail, tc.want)
			}
		})
	}
	wg.Wait()
}

// TestBackendOpenStopsWaitingWhenNoEndpointCanBeDialled: an Open that waits for its store to come
// up (as etcd's client does) is canceled as soon as every endpoint refuses a connection, instead of
// waiting out its deadline; while one endpoint accepts connections, it has its deadline.
func TestBackendOpenStopsWaitingWhenNoEndpointCanBeDialled(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var ended []error
	b := []Backend{{Name: "fake", Open: func(ctx context.Context, _ []string) (core.Store, func() error, error) {
		<-ctx.Done()
		mu.Lock()
		ended = append(ended, ctx.Err())
		mu.Unlock()
		return nil, nil, ctx.Err()
	}}}
	code, _, errOut := runWith(t, b, "inspect", "-fake", "127.0.0.1:1,unix:///nonexistent/sock", "k")
	if code != exitFail || !strings.HasPrefix(errOut, "leasehold inspect: fake unreachable: none of its 2 endpoints answers") {
		t.Errorf("two endpoints refusing: exit %d, stderr %q; want %d, unreachable", code, errOut, exitFail)
	}
	if want := []error{context.Canceled}; !slices.Equal(ended, want) {
		t.Errorf("Open's wait ended with %v, want %v", ended, want)
	}
	t.Run("one endpoint accepts connections", func(t *testing.T) {
		testenv.SkipShort(t, "waits out Open's deadline")
		ended = nil
		code, _, errOut = runWith(t, b, "inspect", "-fake", "127.0.0.1:1,"+listen(t, silent), "k")
		if code != exitFail || !strings.Contains(errOut, "not a fake server, or a stalled one") {
			t.Errorf("one endpoint silent: exit %d, stderr %q; want %d, a stalled server", code, errOut, exitFail)
		}
		if want := []error{context.DeadlineExceeded}; !slices.Equal(ended, want) {
			t.Errorf("Open's wait ended with %v, want %v", ended, want)
		}
	})
}

func TestEndpointOf(t *testing.T) {
	for _, tc := range []struct {
		url, network, addr string
	}{
		{"127.0.0.1:2379", "tcp", "127.0.0.1:2379"},
		{"http://10.0.0.1:2379", "tcp", "10.0.0.1:2379"},
		{"https://user:pw@[::1]:2379/path", "tcp", "[::1]:2379"},
		{"unix:///run/etcd.sock", "unix", "/run/etcd.sock"},
		{"unix:etcd.sock", "unix", "etcd.sock"},
		{"unixs://etcd.sock", "unix", "etcd.sock"},
		{"http://host", "", ""}, // the driver's default port
		{"host", "", ""},
		{":2379", "", ""},
		{"unix://", "", ""},
	} {
		ep, ok := endpointOf(tc.url)
		if ok != (tc.network != "") || ok && (ep.network != tc.network || ep.addr != tc.addr) {
			t.Errorf("endpointOf(%q) = %+v, %v; want %s %q", tc.url, ep, ok, tc.network, tc.addr)
		}
	}
}

func TestBadBackendsAreRefused(t *testing.T) {
	open := func(context.Context, []string) (core.Store, func() error, error) { return nil, nil, nil }
	flags := func(names ...string) func(*flag.FlagSet) {
		return func(fs *flag.FlagSet) {
			for _, n := range names {
				fs.String(n, "", "")
			}
		}
	}
	for _, tc := range []struct {
		backends []Backend
		want     string // "" for none
	}{
		{[]Backend{{Name: "etcd", Open: open, Flags: flags("etcd-prefix", "etcd-user")}, {Name: "consul2", Open: open}}, ""},
		{[]Backend{{Name: "", Open: open}}, `backend 0: Name "": not lower-case letters`},
		{[]Backend{{Name: "Etcd", Open: open}}, `backend 0: Name "Etcd": not lower-case letters`},
		{[]Backend{{Name: "-etcd", Open: open}}, `backend 0: Name "-etcd": not lower-case letters`},
		{[]Backend{{Name: "redis", Open: open}}, `backend "redis": -redis is a flag already`},
		{[]Backend{{Name: "ttl", Open: open}}, `backend "ttl": -ttl is a flag already`},
		{[]Backend{{Name: "etcd", Open: open}, {Name: "etcd", Open: open}}, `backend "etcd": -etcd is a flag already`},
		{[]Backend{{Name: "etcd"}}, `backend "etcd": no Open`},
		{[]Backend{{Name: "etcd", Open: open, Flags: flags("prefix2")}}, `backend "etcd": flag -prefix2: must be named -etcd-something`},
		{[]Backend{{Name: "pg", Open: open, Flags: flags("pg-schema")}}, `backend "pg": flag -pg-schema: must be named -pg-something, and not as a flag the commands have`},
	} {
		err := checkBackends(tc.backends)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.backends, err, tc.want)
		}
	}
}

// asCLIWithFake is the Backend the test binary has when TestMain runs it as the leasehold command
// with LEASEHOLD_AS_CLI=fake.
func asCLIWithFake() int {
	return Main(newFakeBackend().backend())
}

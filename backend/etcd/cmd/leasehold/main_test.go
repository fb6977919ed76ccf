package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/poll"
)

// Run with LEASEHOLD_AS_CLI=1, the test binary is this command, for end-to-end tests through
// its own process (and the supervisor run starts, which re-executes it).
func TestMain(m *testing.M) {
	if os.Getenv("LEASEHOLD_AS_CLI") == "1" {
		os.Exit(cli.Main(etcdBackend()))
	}
	etcdtest.Main(m)
}

// leasehold runs the command with args and returns its exit status, stdout and stderr.
func leasehold(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "LEASEHOLD_AS_CLI=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("leasehold %q: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

func TestRunHoldsTheKeyOnEtcdAndGivesTheCommandItsFence(t *testing.T) {
	srv := etcdtest.Shared(t)
	code, out, errOut := leasehold(t, t.Context(), "run", "-etcd", srv.Endpoint(), "-key", t.Name(), "--", "sh", "-c", `echo "$LEASEHOLD_FENCE"`)
	if code != 0 {
		t.Fatalf("run: exit %d, stderr %s", code, errOut)
	}
	if f, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64); err != nil || f == 0 {
		t.Errorf("run: the command printed %q as its fence, want a fence above 0", out)
	}
}

func TestInspectShowsWhoRunsUnderTheKeyOnEtcd(t *testing.T) {
	srv := etcdtest.Shared(t)
	key := t.Name()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	dir := t.TempDir()
	started := dir + "/started"
	done := make(chan struct{})
	go func() {
		defer close(done)
		leasehold(t, ctx, "run", "-etcd", srv.Endpoint(), "-key", key, "-value", "nightly backup", "--", "sh", "-c", "touch "+started+"; sleep 30")
	}()
	poll.Until(t, "the command started under the lease", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	// Two endpoints, the first of them dead: the client talks to the one that answers.
	code, out, errOut := leasehold(t, t.Context(), "inspect", "-etcd", "http://127.0.0.1:1,"+srv.Endpoint(), key)
	if code != 0 || !strings.Contains(out, "nightly backup") {
		t.Errorf("inspect: exit %d, stdout %q, stderr %q; want the holder's value", code, out, errOut)
	}
	cancel()
	<-done
}

func TestElectLeadsOnEtcd(t *testing.T) {
	srv := etcdtest.Shared(t)
	code, out, errOut := leasehold(t, t.Context(), "elect", "-etcd", srv.Endpoint(), t.Name(), "leader-a", "--", "echo", "leading")
	if code != 0 || !strings.Contains(out, "leading") {
		t.Errorf("elect: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestEtcdFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-etcd", "ftp://x:1", "-key", "k", "--", "true"}, `scheme "ftp"`},
		{[]string{"run", "-etcd", "http://x", "-key", "k", "--", "true"}, "no port"},
		{[]string{"inspect", "-etcd", "127.0.0.1:2379", "-etcd-prefix", "", "k"}, "-etcd-prefix"},
	} {
		code, _, errOut := leasehold(t, t.Context(), tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestUnreachableEtcdIsReportedPromptly(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	code, _, errOut := leasehold(t, ctx, "inspect", "-etcd", "http://127.0.0.1:1", "k")
	if code == 0 || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("inspect of an endpoint nobody listens on: exit %d, stderr %q; want a failure naming it", code, errOut)
	}
}

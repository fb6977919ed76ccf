package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testenv"
)

func TestVersionLine(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	platform := []string{"GOOS", "linux", "GOARCH", "amd64"}
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"release", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: settings(platform...)},
			"leasehold v1.2.3, go1.26.8 linux/amd64"},
		{"checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261123190000-0123456789ab"},
			Settings: settings(append(platform, "vcs.revision", rev, "vcs.time", "2026-11-23T19:00:00Z", "vcs.modified", "false")...)},
			"leasehold v0.0.0-20261123190000-0123456789ab, commit " + rev + ", committed 2026-11-23T19:00:00Z, go1.26.8 linux/amd64"},
		{"checkout before Go 1.24", &debug.BuildInfo{GoVersion: "go1.23.4", Main: debug.Module{Version: "(devel)"},
			Settings: settings(append(platform, "vcs.revision", rev, "vcs.time", "2026-11-23T19:00:00Z", "vcs.modified", "false")...)},
			"leasehold (devel), commit " + rev + ", committed 2026-11-23T19:00:00Z, go1.23.4 linux/amd64"},
		{"dirty checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: settings(append(platform, "vcs.revision", rev, "vcs.time", "2026-11-23T19:00:00Z", "vcs.modified", "true")...)},
			"leasehold (devel), commit " + rev + ", dirty, committed 2026-11-23T19:00:00Z, go1.26.8 linux/amd64"},
		{"no VCS information", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"leasehold (devel), commit unknown (built without VCS information), go1.26.8"},
		{"this module", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: modulePath, Version: "v1.2.3"}, Settings: settings(platform...)},
			"leasehold v1.2.3, go1.26.8 linux/amd64"},
		{"the etcd build", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: modulePath + "/backend/etcd", Version: "v0.4.0"},
			Deps: []*debug.Module{{Path: "go.etcd.io/etcd/client/v3", Version: "v3.7.3"}, {Path: modulePath, Version: "v1.2.3"}}, Settings: settings(platform...)},
			"leasehold v0.4.0 of github.com/leasehold/leasehold/backend/etcd, with github.com/leasehold/leasehold v1.2.3, go1.26.8 linux/amd64"},
		{"the etcd build in a checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: modulePath + "/backend/etcd", Version: "(devel)"},
			Deps:     []*debug.Module{{Path: modulePath, Version: "v0.0.0-00010101000000-000000000000", Replace: &debug.Module{Path: "../..", Version: "(devel)"}}},
			Settings: settings(append(platform, "vcs.revision", rev, "vcs.time", "2026-11-23T19:00:00Z", "vcs.modified", "false")...)},
			"leasehold (devel) of github.com/leasehold/leasehold/backend/etcd, with github.com/leasehold/leasehold => ../.., commit " + rev + ", committed 2026-11-23T19:00:00Z, go1.26.8 linux/amd64"},
		{"no build information", nil, "leasehold (unknown version: the binary carries no build information)"},
	}
	for _, tc := range tests {
		if got := versionLine(tc.bi); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestVersionCommand(t *testing.T) {
	code, out, errOut := runArgs(t, context.Background(), "version")
	if code != exitOK || errOut != "" || !strings.HasPrefix(out, "leasehold ") || strings.Count(out, "\n") != 1 {
		t.Errorf("version: exit %d, stdout %q, stderr %q; want one line starting with \"leasehold \"", code, out, errOut)
	}
	code, out, _ = runArgs(t, context.Background(), "version", "--help")
	if code != exitOK || !strings.Contains(out, "Usage: leasehold version") {
		t.Errorf("version --help: exit %d, %q", code, out)
	}
	code, _, errOut = runArgs(t, context.Background(), "version", "extra")
	if code != exitUsage || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("version extra: exit %d, stderr %q; want %d", code, errOut, exitUsage)
	}
}

// TestVersionFromACheckout builds leasehold from a git checkout of this module's files, clean
// and then (with LEASEHOLD_SOAK=1) with a change not committed, and checks that `leasehold
// version` names the commit, "(devel)" and, the second time only, "dirty".
func TestVersionFromACheckout(t *testing.T) {
	testenv.SkipShort(t, "builds the command twice")
	t.Parallel()
	for _, tool := range []string{"go", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not on PATH", tool)
		}
	}
	root := moduleRoot(t)
	src := filepath.Join(t.TempDir(), "src")
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@leasehold.invalid"}, args...)...)
		cmd.Dir = src
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// A copy of the module's files (those git would see in the working tree), in a repository
	// of its own: the copy has a .git directory, which the go command needs to stamp a build.
	ls := exec.Command("git", "ls-files", "-co", "--exclude-standard")
	ls.Dir = root
	files, err := ls.Output()
	if err != nil {
		t.Skipf("the module is not in a git checkout: %v", err)
	}
	for _, f := range strings.Split(strings.TrimSpace(string(files)), "\n") {
		data, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "snapshot")
	head := git("rev-parse", "HEAD")

	version := func() string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "leasehold")
		build := exec.Command("go", "build", "-buildvcs=true", "-trimpath", "-o", bin, "./cmd/leasehold")
		build.Dir = src
		build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=true", "GOPROXY=off", "GOWORK=off")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		out, err := exec.Command(bin, "version").Output()
		if err != nil {
			t.Fatalf("leasehold version: %v\n%s", err, out)
		}
		return string(out)
	}
	// Go 1.24 and later derive a pseudo-version from the commit (v0.0.0-20261123194248-
	// 93afc9a216f7, +dirty with changes); earlier ones said (devel).
	check := func(out, vcs string) {
		t.Helper()
		v, rest, _ := strings.Cut(strings.TrimPrefix(out, "leasehold "), ", ")
		if v != "(devel)" && !strings.Contains(v, head[:12]) || !strings.HasPrefix(rest, vcs) {
			t.Errorf("leasehold version at %s: %q, want (devel) or a version naming the commit, then %q", head, out, vcs)
		}
	}
	check(version(), "commit "+head+", committed ")
	if !testenv.Soak() {
		// A build is some 3 s of CPU: what a dirty build's settings print is TestVersionLine's
		// "dirty checkout"; the toolchain's stamping of one is checked with LEASEHOLD_SOAK=1.
		return
	}
	if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check(version(), "commit "+head+", dirty, committed ")
}

// moduleRoot returns the directory of this module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

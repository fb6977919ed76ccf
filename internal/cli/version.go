package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// versionHelp is the text of `leasehold version --help`.
const versionHelp = `Usage: leasehold version

Prints the module version of this leasehold binary and the VCS commit it was built from, as
the Go toolchain recorded them, then the Go version and platform:

  leasehold v1.2.3, go1.26.8 linux/amd64
      installed with 'go install github.com/leasehold/leasehold/cmd/leasehold@v1.2.3'
  leasehold v0.0.0-20261123190000-d2ce679520ab+dirty, commit d2ce6795..., dirty,
  committed 2026-11-23T19:00:00Z, go1.26.8 linux/amd64
      built in a git checkout: "dirty" when it had uncommitted changes; Go before 1.24
      shows "(devel)" as the version
  leasehold (devel), commit unknown (built without VCS information), ...
      built with -buildvcs=false, or outside a checkout (a git worktree counts as outside)
  leasehold v0.4.0 of github.com/leasehold/leasehold/backend/etcd, with
  github.com/leasehold/leasehold v1.2.3, go1.26.8 linux/amd64
      the etcd build: the version is that of its module, backend/etcd
`

// versionCommand runs `leasehold version args` and returns the exit status.
func versionCommand(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), versionHelp) }
	if ok, code := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	fmt.Fprintln(stdout, versionLine(bi))
	return exitOK
}

// modulePath is the path of Leasehold's module, which a build of leasehold from another module
// (backend/etcd/cmd/leasehold) holds as a dependency.
const modulePath = "github.com/leasehold/leasehold"

// versionLine describes the build bi in one line: "leasehold", the main module's version (and its
// path, and the Leasehold it holds, when it is another module), then
// the commit, "dirty" and the commit time when the build recorded them, the Go version and
// the platform. A nil bi is a binary without build information.
func versionLine(bi *debug.BuildInfo) string {
	if bi == nil {
		return "leasehold (unknown version: the binary carries no build information)"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	parts := []string{"leasehold " + version}
	if bi.Main.Path != "" && bi.Main.Path != modulePath {
		// Built from another module (the etcd build): the version is that module's; say which,
		// and which Leasehold it holds.
		parts[0] += " of " + bi.Main.Path
		for _, d := range bi.Deps {
			if d.Path != modulePath {
				continue
			}
			with := d.Version
			if r := d.Replace; r != nil {
				with = "=> " + r.Path // a directory, in a checkout; its Version is "(devel)" or ""
				if r.Version != "" && r.Version != "(devel)" {
					with += " " + r.Version
				}
			}
			parts = append(parts, "with "+modulePath+" "+with)
		}
	}
	var rev, when, modified, goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	switch {
	case rev != "":
		parts = append(parts, "commit "+rev)
		if modified == "true" {
			parts = append(parts, "dirty")
		}
		if when != "" {
			parts = append(parts, "committed "+when)
		}
	case version == "(devel)":
		parts = append(parts, "commit unknown (built without VCS information)")
	}
	platform := bi.GoVersion
	if goos != "" && goarch != "" {
		platform += " " + goos + "/" + goarch
	}
	if platform != "" {
		parts = append(parts, platform)
	}
	return strings.Join(parts, ", ")
}

package leaseotel

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/leasehold/leasehold/core"
)

// errorType returns the error.type of err, a value of a small set: the name of the Leasehold
// or context sentinel it wraps (lost, closed, limit_mismatch, not_held, invalid, canceled,
// deadline_exceeded), or else the Go type of the first error in its chain not made by fmt or
// errors (such as *net.OpError), or _OTHER.
func errorType(err error) string {
	for _, s := range []struct {
		err  error
		name string
	}{
		{core.ErrLost, "lost"}, {core.ErrClosed, "closed"}, {core.ErrLimitMismatch, "limit_mismatch"},
		{core.ErrNotHeld, "not_held"}, {core.ErrInvalid, "invalid"}, {core.ErrNotAcquired, "not_acquired"},
		{context.Canceled, "canceled"}, {context.DeadlineExceeded, "deadline_exceeded"},
	} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	for err != nil {
		name := fmt.Sprintf("%T", err)
		if !strings.HasPrefix(name, "*fmt.") && !strings.HasPrefix(name, "*errors.") {
			return name
		}
		err = errors.Unwrap(err)
	}
	return "_OTHER"
}

// fallbackVersion is the instrumentation scope's version when the build has no module version
// for this package (a test, or a build of its own source tree).
const fallbackVersion = "v0.0.0-devel"

// moduleVersion returns the version of this module in the running binary, from its build info.
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fallbackVersion
	}
	mods := append([]*debug.Module{&bi.Main}, bi.Deps...)
	for _, m := range mods {
		if m.Path != ScopeName {
			continue
		}
		if m.Replace != nil && m.Replace.Version != "" {
			return m.Replace.Version
		}
		if m.Version != "" && m.Version != "(devel)" {
			return m.Version
		}
	}
	return fallbackVersion
}

package rediscore

import (
	"context"
	"strings"
	"sync/atomic"
	"time"
)

// FunctionClient is what an adapter supplies so that its scripts run as Redis Functions where
// the server allows them, and by EVALSHA where it does not.
type FunctionClient interface {
	// FCall calls script's function in the library (FunctionName names it) as c says.
	FCall(ctx context.Context, script Script, c Call) (any, error)
	// LoadLibrary runs FUNCTION LOAD Library on every node the client sends scripts to (on a
	// Cluster, every primary), and returns each node's error.
	LoadLibrary(ctx context.Context) []error
	// Eval runs script by EVALSHA, and EVAL when the server has not seen it.
	Eval(ctx context.Context, script Script, c Call) (any, error)
	// Reply reports whether err is the server's error reply, and its text.
	Reply(err error) (string, bool)
}

// Functions runs the scripts of one client as the functions of Library, loaded once per server
// (FUNCTION LOAD, then FCALL: the prelude is not run again on every call, which saves the server
// a few µs per call), and falls back to EVALSHA for good when a server refuses the library:
// one older than Redis 7.0, a user whose ACL does not allow FUNCTION LOAD or FCALL, a proxy that
// does not pass them. A server that lost the library (restarted without persistence, FUNCTION
// FLUSH, a new Cluster node) gets it again on the next call. The zero value is ready; it is safe
// for concurrent use.
type Functions struct {
	state atomic.Int32
	// retryAt is when, in Unix ns, a load may be tried again after one that could not reach
	// every node: until then calls use EVALSHA rather than wait for an unreachable node each.
	retryAt atomic.Int64
}

// loadRetry is how long after a load that could not reach every node the next is tried.
const loadRetry = time.Second

const (
	fnUnknown int32 = iota // the library has not been loaded yet
	fnLoaded               // FCALL
	fnRefused              // EVALSHA, for good
)

// Run runs script as call says: by FCALL while the library is loaded (loading it first
// when it is not, or when the server has lost it), else by EVALSHA. It costs one round trip, and
// one more when it loads the library.
func (f *Functions) Run(ctx context.Context, c FunctionClient, script Script, call Call) (any, error) {
	switch f.state.Load() {
	case fnRefused:
		return c.Eval(ctx, script, call)
	case fnUnknown:
		if !f.loadDue() || !f.load(ctx, c) {
			return c.Eval(ctx, script, call)
		}
	}
	r, err := c.FCall(ctx, script, call)
	if msg, ok := c.Reply(err); ok && fcallRefused(msg) {
		// A user allowed FUNCTION LOAD but not FCALL, or whose ACL changed after the load:
		// the server ran nothing, so EVALSHA, for good, as where the load was refused.
		f.state.Store(fnRefused)
		return c.Eval(ctx, script, call)
	}
	if msg, ok := c.Reply(err); ok && functionMissing(msg) {
		if !f.loadDue() || !f.load(ctx, c) {
			return c.Eval(ctx, script, call)
		}
		r, err = c.FCall(ctx, script, call)
		if msg, ok := c.Reply(err); ok && functionMissing(msg) {
			// Lost again between the load and the call (another client flushing the
			// server's functions): nothing ran, so this call runs by EVALSHA instead of
			// failing; the next one loads it again.
			return c.Eval(ctx, script, call)
		}
	}
	return r, err
}

// FunctionName returns the name of script's function in Library.
func FunctionName(script Script) string { return functionNames[script] }

// load loads the library on every node and reports whether FCALL can be used: false when a node
// refused it (and then for good) or could not be reached (then the next call tries again).
func (f *Functions) load(ctx context.Context, c FunctionClient) bool {
	unreached := false
	for _, err := range c.LoadLibrary(ctx) {
		if err == nil {
			continue
		}
		msg, ok := c.Reply(err)
		switch {
		case !ok:
			unreached = true
		case strings.Contains(msg, "already exists"), strings.HasPrefix(msg, "READONLY"):
			// Loaded before, by this client or another of this version; or a replica, which
			// has it from its primary.
		default:
			f.state.Store(fnRefused)
			return false
		}
	}
	if unreached {
		f.retryAt.Store(time.Now().Add(loadRetry).UnixNano())
		return false
	}
	f.state.CompareAndSwap(fnUnknown, fnLoaded)
	return f.state.Load() == fnLoaded
}

// fcallRefused reports whether an error reply says the user may not run FCALL itself (not a
// command the function runs: that error comes from inside the function, which ran).
func fcallRefused(msg string) bool {
	return strings.HasPrefix(msg, "NOPERM") && strings.Contains(strings.ToLower(msg), "'fcall' command")
}

// loadDue reports whether a load may be tried now (see retryAt).
func (f *Functions) loadDue() bool { return time.Now().UnixNano() >= f.retryAt.Load() }

// functionMissing reports whether an error reply says the server has no such function: the
// whole reply, so that a script's own error that merely contains the words (a WRONGTYPE error
// naming a key that does) is not taken for it and the script run again.
func functionMissing(msg string) bool {
	return strings.EqualFold(strings.TrimPrefix(msg, "ERR "), "function not found")
}

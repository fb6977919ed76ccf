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
//
// A server whose library is of another layout version (see LibraryName) is refused: every call
// returns a *LayoutError, and the load is tried again after loadRetry, so that a Store starts
// using the server once the other version's library is deleted (FUNCTION DELETE leasehold).
type Functions struct {
	state atomic.Int32
	// found is the layout version of the library another Store loaded, while state is
	// fnMismatch.
	found atomic.Int64
	// retryAt is when, in Unix ns, a load may be tried again after one that could not reach
	// every node: until then calls use EVALSHA rather than wait for an unreachable node each.
	retryAt atomic.Int64
}

// loadRetry is how long after a load that could not reach every node the next is tried.
const loadRetry = time.Second

const (
	fnUnknown  int32 = iota // the library has not been loaded yet
	fnLoaded                // FCALL
	fnRefused               // EVALSHA, for good
	fnMismatch              // the loaded library is of another layout version: refused
)

// Run runs script as call says: by FCALL while the library is loaded (loading it first
// when it is not, or when the server has lost it), else by EVALSHA. It costs one round trip, and
// one more when it loads the library.
func (f *Functions) Run(ctx context.Context, c FunctionClient, script Script, call Call) (any, error) {
	switch f.state.Load() {
	case fnRefused:
		return c.Eval(ctx, script, call)
	case fnMismatch:
		if !f.loadDue() {
			return nil, libraryLayout(f.found.Load())
		}
		f.state.CompareAndSwap(fnMismatch, fnUnknown)
		fallthrough
	case fnUnknown:
		if !f.loadDue() {
			return c.Eval(ctx, script, call)
		}
		if ok, err := f.load(ctx, c); err != nil || !ok {
			return f.instead(ctx, c, script, call, err)
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
		if !f.loadDue() {
			return c.Eval(ctx, script, call)
		}
		if ok, err := f.load(ctx, c); err != nil || !ok {
			return f.instead(ctx, c, script, call, err)
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

// instead runs a call that cannot FCALL: by EVALSHA, or, when the library is of another layout
// version (err), not at all.
func (f *Functions) instead(ctx context.Context, c FunctionClient, script Script, call Call, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return c.Eval(ctx, script, call)
}

// FunctionName returns the name of script's function in Library.
func FunctionName(script Script) string { return functionNames[script] }

// load loads the library on every node and reports whether FCALL can be used: false when a node
// refused it (and then for good) or could not be reached (then the next call tries again); and a
// *LayoutError when a node holds the library of another layout version (see loaded).
func (f *Functions) load(ctx context.Context, c FunctionClient) (bool, error) {
	unreached, exists := false, false
	for _, err := range c.LoadLibrary(ctx) {
		if err == nil {
			continue
		}
		msg, ok := c.Reply(err)
		switch {
		case !ok:
			unreached = true
		case strings.Contains(msg, "already exists"):
			exists = true // loaded before, by this client or another, of this version or not
		case strings.HasPrefix(msg, "READONLY"):
			// A replica, which has it from its primary.
		default:
			f.state.Store(fnRefused)
			return false, nil
		}
	}
	if unreached {
		f.retryAt.Store(time.Now().Add(loadRetry).UnixNano())
		return false, nil
	}
	if exists {
		if ok, err := f.loaded(ctx, c); !ok || err != nil {
			return false, err
		}
	}
	f.state.CompareAndSwap(fnUnknown, fnLoaded)
	return f.state.Load() == fnLoaded, nil
}

// loaded asks a server whose library was loaded before which layout version it is (one FCALL
// of LayoutFunction, made once per Store, when it first finds the library there), and reports
// whether it is this one's; another version's is a *LayoutError, and refuses the calls until
// loadRetry has passed.
func (f *Functions) loaded(ctx context.Context, c FunctionClient) (bool, error) {
	r, err := c.FCall(ctx, layoutScript, Call{Args: make([]any, Head)})
	found, isInt := r.(int64)
	msg, isReply := c.Reply(err)
	switch {
	case err == nil && isInt && found == LayoutVersion:
		return true, nil
	case err == nil && isInt:
		f.found.Store(found)
		f.retryAt.Store(time.Now().Add(loadRetry).UnixNano())
		f.state.Store(fnMismatch)
		return false, libraryLayout(found)
	case isReply && fcallRefused(msg):
		f.state.Store(fnRefused)
		return false, nil
	default:
		// Unreadable, unreachable, or without the function (flushed since the load, or a library
		// from before versions): EVALSHA meanwhile, whose scripts check each key's layout.
		f.retryAt.Store(time.Now().Add(loadRetry).UnixNano())
		return false, nil
	}
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

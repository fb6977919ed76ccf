package rediscore

import (
	"context"
	"strings"
	"sync/atomic"
	"time"
)

// functions runs a Store's scripts as the functions of Library, loaded once per server
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
type functions struct {
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

// run runs script as call says, through a: by FCALL while the library is loaded (loading it
// first when it is not, or when the server has lost it), else by EVALSHA. It costs one round
// trip, and one more when it loads the library.
func (f *functions) run(ctx context.Context, a sender, script Script, call Call) (any, error) {
	switch f.state.Load() {
	case fnRefused:
		return evalsha(ctx, a, script, call)
	case fnMismatch:
		if !f.loadDue() {
			return nil, libraryLayout(f.found.Load())
		}
		f.state.CompareAndSwap(fnMismatch, fnUnknown)
		fallthrough
	case fnUnknown:
		if !f.loadDue() {
			return evalsha(ctx, a, script, call)
		}
		if ok, err := f.load(ctx, a); err != nil || !ok {
			return f.instead(ctx, a, script, call, err)
		}
	}
	r, err := fcall(ctx, a, script, call)
	if msg, ok := a.ErrorReply(err); ok && fcallRefused(msg) {
		// A user allowed FUNCTION LOAD but not FCALL, or whose ACL changed after the load:
		// the server ran nothing, so EVALSHA, for good, as where the load was refused.
		f.state.Store(fnRefused)
		return evalsha(ctx, a, script, call)
	}
	if msg, ok := a.ErrorReply(err); ok && functionMissing(msg) {
		if !f.loadDue() {
			return evalsha(ctx, a, script, call)
		}
		if ok, err := f.load(ctx, a); err != nil || !ok {
			return f.instead(ctx, a, script, call, err)
		}
		r, err = fcall(ctx, a, script, call)
		if msg, ok := a.ErrorReply(err); ok && functionMissing(msg) {
			// Lost again between the load and the call (another client flushing the
			// server's functions): nothing ran, so this call runs by EVALSHA instead of
			// failing; the next one loads it again.
			return evalsha(ctx, a, script, call)
		}
	}
	return r, err
}

// sender is what functions sends through: the Store's Adapter, with the Store's resending of
// a command that never left the client.
type sender interface {
	do(ctx context.Context, c Call) (any, error)
	LoadLibrary(ctx context.Context, library string) []error
	ErrorReply(err error) (string, bool)
}

// fcall calls script's function.
func fcall(ctx context.Context, a sender, script Script, call Call) (any, error) {
	return a.do(ctx, call.as("fcall", boxedNames[script]))
}

// evalsha runs script by EVALSHA, and by EVAL when the server has not seen it (NOSCRIPT).
func evalsha(ctx context.Context, a sender, script Script, call Call) (any, error) {
	r, err := a.do(ctx, call.as("evalsha", shas[script]))
	if msg, ok := a.ErrorReply(err); ok && strings.HasPrefix(msg, "NOSCRIPT") {
		return a.do(ctx, call.as("eval", Sources[script]))
	}
	return r, err
}

// instead runs a call that cannot FCALL: by EVALSHA, or, when the library is of another layout
// version (err), not at all.
func (f *functions) instead(ctx context.Context, a sender, script Script, call Call, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return evalsha(ctx, a, script, call)
}

// boxedNames and shas are the scripts' function names and SHA1s, indexed by Script, boxed once
// (by init, once functionNames are known).
var boxedNames, shas [len(Sources)]any

// FunctionName returns the name of script's function in Library.
func FunctionName(script Script) string { return functionNames[script] }

// load loads the library on every node and reports whether FCALL can be used: false when a node
// refused it (and then for good) or could not be reached (then the next call tries again); and a
// *LayoutError when a node holds the library of another layout version (see loaded).
func (f *functions) load(ctx context.Context, a sender) (bool, error) {
	unreached, exists := false, false
	for _, err := range a.LoadLibrary(ctx, Library) {
		if err == nil {
			continue
		}
		msg, ok := a.ErrorReply(err)
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
		if ok, err := f.loaded(ctx, a); !ok || err != nil {
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
func (f *functions) loaded(ctx context.Context, a sender) (bool, error) {
	r, err := fcall(ctx, a, layoutScript, Call{Args: make([]any, Head)})
	found, isInt := r.(int64)
	msg, isReply := a.ErrorReply(err)
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
func (f *functions) loadDue() bool { return time.Now().UnixNano() >= f.retryAt.Load() }

// functionMissing reports whether an error reply says the server has no such function: the
// whole reply, so that a script's own error that merely contains the words (a WRONGTYPE error
// naming a key that does) is not taken for it and the script run again.
func functionMissing(msg string) bool {
	return strings.EqualFold(strings.TrimPrefix(msg, "ERR "), "function not found")
}

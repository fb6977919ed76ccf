package rediscore

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strconv"
	"strings"
)

var (
	//go:embed common.lua
	commonPrelude string
	//go:embed line.lua
	commonLine string
	//go:embed acquire.lua
	acquireBody string
	//go:embed extend.lua
	extendBody string
	//go:embed release.lua
	releaseBody string
	//go:embed inspect.lua
	inspectBody string
	//go:embed leave.lua
	leaveBody string
	//go:embed watch.lua
	watchBody string
	//go:embed guard.lua
	guard string
	//go:embed quick.lua
	quick string
)

// common is the Lua every script shares: the prelude (the layout, a call's state, the lease
// hash's codec), the line (its places, grants and serving, and settle, a writing call's end) and
// the quick paths of the uncontended acquire, extend and release.
var common = commonPrelude + "\n" + commonLine + "\n" + quick

// Script names one of the scripts a Client runs: an index into Sources and functionNames.
type Script int

const (
	acquireScript Script = iota
	extendScript
	releaseScript
	inspectScript
	leaveScript
	watchScript
)

// bodies are the operations' bodies, indexed by Script, with the name of each in the library.
var bodies = [...]struct {
	name, body string
	flags      string // the function's flags, as a Lua table
	// writes says the body may change the lease hash: its call writes back what it changed
	// (see guard.lua). Only a read-only body has it false.
	writes bool
	// quick names the operation's quick path in quick.lua ("nil": none).
	quick string
}{
	acquireScript: {"acquire", acquireBody, "{}", true, "quick_acquire"},
	extendScript:  {"extend", extendBody, "{}", true, "quick_extend"},
	// Ending a lease and leaving the line mostly delete, and must work when the server is out
	// of memory, as the same commands do in a script (EVALSHA refuses only the commands that
	// may grow memory).
	releaseScript: {"release", releaseBody, "{'allow-oom'}", true, "quick_release"},
	inspectScript: {"inspect", inspectBody, "{'no-writes'}", false, "nil"},
	leaveScript:   {"leave", leaveBody, "{'allow-oom'}", true, "nil"},
	watchScript:   {"watch", watchBody, "{}", true, "nil"},
}

// Sources are the scripts' full sources, indexed by Script, for EVALSHA (EVAL the first time on
// a server): the shared prelude and guard, then the operation's body as main(all), run by
// guarded, where all is the lease hash as HGETALL returns it (see guard.lua). A
// driver loads each once per server and keeps nothing else of them.
var Sources = func() (s [len(bodies)]string) {
	for i, b := range bodies {
		s[i] = "local eval_keys, eval_args = KEYS, ARGV\n" + common + guard +
			"local function main(all)\n" + b.body + "\nend\nreturn guarded(main, eval_keys, eval_args, " + strconv.FormatBool(b.writes) + ", " + b.quick + ")\n"
	}
	return s
}()

// LibraryName names the scripts' Redis Functions library: "leasehold_" and 16 hex digits of its
// source's SHA-1, so that clients of different versions keep a library each on one server.
var LibraryName string

// Library is the source of the Redis Functions library that holds every script as a function
// (FUNCTION LOAD, once per server; servers from Redis 7.0 and Valkey): the prelude and guard
// once, then each body as a function registered as functionNames names it. It is the same Lua as
// Sources, so the two ways run the same code on the same layout.
var Library string

// functionNames are the names of the library's functions, indexed by Script: FCALL them.
var functionNames [len(bodies)]string

func init() {
	var b strings.Builder
	b.WriteString(common)
	b.WriteString(guard)
	for _, op := range bodies {
		b.WriteString("local function " + op.name + "(all)\n" + op.body + "\nend\n")
	}
	code := b.String()
	sum := sha1.Sum([]byte(code))
	LibraryName = "leasehold_" + hex.EncodeToString(sum[:8])
	var reg strings.Builder
	for i, op := range bodies {
		functionNames[i] = LibraryName + "_" + op.name
		reg.WriteString("redis.register_function{function_name = '" + functionNames[i] + "', flags = " + op.flags +
			", callback = function(keys, args) return guarded(" + op.name + ", keys, args, " +
			strconv.FormatBool(op.writes) + ", " + op.quick + ") end}\n")
	}
	Library = "#!lua name=" + LibraryName + "\n" + code + reg.String()
}

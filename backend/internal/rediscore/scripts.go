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

// LayoutVersion is the version of the stored layout these scripts read and write, and of the
// scripts' arguments and replies: the lease hash's entry layout, and the version in the names of
// the library's functions. A change to either that a Store of the version before would misread
// takes the next version.
const LayoutVersion = 1

// common is the Lua every script shares, with LAYOUT_VERSION and KEEP_ENTRY written out (see
// withLayout: the library keeps no variable for them from one call to the next): the prelude (the layout,
// a call's state, the lease hash's codec), the line (its places, grants and serving, and settle,
// a writing call's end) and the quick paths of the uncontended acquire, extend and release.
var common = withLayout(commonPrelude + "\n" + commonLine + "\n" + quick)

// keepEntry names the lease hash's entry that holds when the hash expires: "keep@" and the
// layout version. Every lease hash has it, so its name is where a Store reads the layout's version
// at no cost: the calls read the whole hash anyway (see common.lua).
var keepEntry = "keep@" + strconv.Itoa(LayoutVersion)

// withLayout returns the Lua src with LAYOUT_VERSION and KEEP_ENTRY written as the layout's
// version and keepEntry, as string literals.
func withLayout(src string) string {
	return strings.NewReplacer("LAYOUT_VERSION", "'"+strconv.Itoa(LayoutVersion)+"'", "KEEP_ENTRY", "'"+keepEntry+"'").Replace(src)
}

// Script names one of the scripts a Client runs: an index into Sources and functionNames.
type Script int

const (
	acquireScript Script = iota
	extendScript
	releaseScript
	inspectScript
	leaveScript
	watchScript
	// layoutScript names the library's layout function (see LayoutFunction): it reads no key.
	layoutScript
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
// guarded, where all is the lease hash as HGETALL returns it (see guard.lua); and the layout
// function's body. A driver loads each once per server and keeps nothing else of them.
var Sources = func() (s [len(bodies) + 1]string) {
	for i, b := range bodies {
		s[i] = "local eval_keys, eval_args = KEYS, ARGV\n" + common + guard +
			"local function main(all)\n" + withLayout(b.body) + "\nend\nreturn guarded(main, eval_keys, eval_args, " + strconv.FormatBool(b.writes) + ", " + b.quick + ")\n"
	}
	s[layoutScript] = "return " + strconv.Itoa(LayoutVersion) + "\n"
	return s
}()

// LibraryName names the scripts' Redis Functions library, whatever its version: a server holds
// one. Its functions' names carry the layout's version (FunctionName), so a Store never calls
// another version's; the one function whose name does not, LayoutFunction, says which version
// the loaded library is.
const LibraryName = "leasehold"

// LayoutFunction names the library's function that returns its layout version, in every
// version: a Store that finds the library loaded by another reads it there (see Functions).
const LayoutFunction = LibraryName + "_layout"

// Library is the source of the Redis Functions library that holds every script as a function
// (FUNCTION LOAD, once per server; servers from Redis 7.0 and Valkey): the prelude and guard
// once, then each body as a function registered as functionNames names it, and the layout
// function. It is the same Lua as Sources, so the two ways run the same code on the same layout.
var Library string

// functionNames are the names of the library's functions, indexed by Script: FCALL them.
var functionNames [len(Sources)]string

func init() {
	var b strings.Builder
	b.WriteString("#!lua name=" + LibraryName + "\n")
	b.WriteString(common)
	b.WriteString(guard)
	for _, op := range bodies {
		b.WriteString("local function " + op.name + "(all)\n" + withLayout(op.body) + "\nend\n")
	}
	for i, op := range bodies {
		functionNames[i] = LibraryName + "_v" + strconv.Itoa(LayoutVersion) + "_" + op.name
		b.WriteString("redis.register_function{function_name = '" + functionNames[i] + "', flags = " + op.flags +
			", callback = function(keys, args) return guarded(" + op.name + ", keys, args, " +
			strconv.FormatBool(op.writes) + ", " + op.quick + ") end}\n")
	}
	functionNames[layoutScript] = LayoutFunction
	b.WriteString("redis.register_function{function_name = '" + LayoutFunction + "', flags = {'no-writes'}, " +
		"callback = function() return " + strconv.Itoa(LayoutVersion) + " end}\n")
	Library = b.String()
	for i, src := range Sources {
		sum := sha1.Sum([]byte(src))
		boxedNames[i], shas[i] = functionNames[i], hex.EncodeToString(sum[:])
	}
}

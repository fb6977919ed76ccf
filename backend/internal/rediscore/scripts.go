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
)

// LayoutVersion is the version of the stored layout these scripts read and write, and of the
// scripts' arguments and replies: the lease hash's entry layout, and the version in the names of
// the library's functions. A change to either that a Store of the version before would misread
// takes the next version.
const LayoutVersion = 2

// common is the Lua every script shares, with LAYOUT_VERSION and KEEP_ENTRY written out (see
// withLayout: the library keeps no variable for them from one call to the next): the prelude (the
// layout, a call's state, the lease hash's codec), the line (its places, grants and serving, and
// settle, a writing call's end) and guarded, which runs an operation's two tiers.
var common = withLayout(commonPrelude + "\n" + commonLine + "\n" + guard)

// keepEntry names the lease hash's entry that holds when the hash expires: "keep@" and the
// layout version. Every lease hash has it, so its name is where a Store reads the layout's version
// at no cost: the calls read the whole hash anyway (see common.lua).
var keepEntry = "keep@" + strconv.Itoa(LayoutVersion)

// withLayout returns the Lua src with LAYOUT_VERSION and KEEP_ENTRY written as the layout's
// version and keepEntry, as string literals.
func withLayout(src string) string {
	v := strconv.Itoa(LayoutVersion)
	return strings.NewReplacer("LAYOUT_VERSION", "'"+v+"'", "KEEP_ENTRY", "'"+keepEntry+"'",
		"LONE_TAG", "'"+loneTag+"'", "LONE_PATTERN", "'^L@"+v+" (%d+) (%d+) ()'", "LONE_FENCE_PATTERN", "'^L@"+v+" (%d+)$'", "LONE_SLACK", "2").Replace(src)
}

// loneTag starts a lone lease's string (see common.lua): "L@" and the layout version.
var loneTag = "L@" + strconv.Itoa(LayoutVersion) + " "

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

// opSource is an operation's Lua: its source (its general path, a function named as the
// operation, and its fast path, named name_fast, and lone tier, name_lone, if any), with the
// names of the script's arguments, in ARGV order (see args.go), written where the source says
// ", PARAMS" (after another parameter) or "(PARAMS)" (alone).
type opSource struct {
	name, src string
	params    []string
	flags     string // the function's flags, as a Lua table
	// writes says the operation may change the lease hash: its call writes back what it changed
	// (see guard.lua). Only a read-only one has it false.
	writes bool
	// fast says the source has a fast path (see common.lua).
	fast bool
	// lone says the source has a lone tier, name_lone, run on a lone lease (see common.lua).
	lone bool
}

// ops are the operations, indexed by Script.
var ops = [...]opSource{
	acquireScript: {"acquire", acquireBody, acquireParams[:], "{}", true, true, true},
	extendScript:  {"extend", extendBody, extendParams[:], "{}", true, true, true},
	// Ending a lease and leaving the line mostly delete, and must work when the server is out
	// of memory, as the same commands do in a script (EVALSHA refuses only the commands that
	// may grow memory).
	releaseScript: {"release", releaseBody, releaseParams[:], "{'allow-oom'}", true, true, true},
	inspectScript: {"inspect", inspectBody, nil, "{'no-writes'}", false, false, false},
	leaveScript:   {"leave", leaveBody, leaveParams[:], "{'allow-oom'}", true, false, false},
	watchScript:   {"watch", watchBody, watchParams[:], "{}", true, false, false},
}

// source returns the operation's Lua: its source with its parameters named and the layout
// written out (see withLayout).
func (op *opSource) source() string {
	var names strings.Builder
	for _, p := range op.params {
		names.WriteString(", " + p)
	}
	src := strings.ReplaceAll(op.src, ", PARAMS", names.String())
	return withLayout(strings.ReplaceAll(src, "(PARAMS)", "("+strings.TrimPrefix(names.String(), ", ")+")"))
}

// run returns the Lua that runs the operation by guarded on keys and args (Lua expressions).
func (op *opSource) run(keys, args string) string {
	fast, lone := "nil", "nil"
	if op.fast {
		fast = op.name + "_fast"
	}
	if op.lone {
		lone = op.name + "_lone"
	}
	return "guarded(" + op.name + ", " + fast + ", " + lone + ", " + keys + ", " + args + ", " + strconv.FormatBool(op.writes) + ")"
}

// Sources are the scripts' full sources, indexed by Script, for EVALSHA (EVAL the first time on
// a server): the shared prelude, then the operation's tiers, run by guarded with the script's
// KEYS and ARGV (see guard.lua); and the layout function's body. A driver loads each once per
// server and keeps nothing else of them.
var Sources = func() (s [len(ops) + 1]string) {
	for i := range ops {
		op := &ops[i]
		s[i] = "local eval_keys, eval_args = KEYS, ARGV\n" + common + op.source() + "\nreturn " + op.run("eval_keys", "eval_args") + "\n"
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
	for i := range ops {
		b.WriteString(ops[i].source() + "\n")
	}
	for i := range ops {
		op := &ops[i]
		functionNames[i] = LibraryName + "_v" + strconv.Itoa(LayoutVersion) + "_" + op.name
		b.WriteString("redis.register_function{function_name = '" + functionNames[i] + "', flags = " + op.flags +
			", callback = function(keys, args) return " + op.run("keys", "args") + " end}\n")
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

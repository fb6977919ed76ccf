package rediscore

import _ "embed"

var (
	//go:embed common.lua
	common string
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

// Script names one of the scripts a Client runs: an index into Sources.
type Script int

const (
	acquireScript Script = iota
	extendScript
	releaseScript
	inspectScript
	leaveScript
	watchScript
)

// Sources are the scripts' full sources, indexed by Script: the shared prelude, then the
// operation's body as a function run under the guard. A driver loads each once per server
// (EVALSHA, falling back to EVAL) and keeps nothing else of them.
var Sources = [...]string{
	acquireScript: script(acquireBody),
	extendScript:  script(extendBody),
	releaseScript: script(releaseBody),
	inspectScript: script(inspectBody),
	leaveScript:   script(leaveBody),
	watchScript:   script(watchBody),
}

func script(body string) string { return common + "local function main()\n" + body + guard }

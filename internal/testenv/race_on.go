//go:build race

package testenv

// Race reports whether the test binary was built with the race detector (-race), which makes
// every goroutine several times slower: packages whose tests bound timings run fewer at once.
const Race = true

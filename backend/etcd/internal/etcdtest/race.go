//go:build race

package etcdtest

// raceEnabled is whether the tests run under the race detector.
const raceEnabled = true

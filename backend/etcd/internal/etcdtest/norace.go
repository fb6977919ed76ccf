//go:build !race

package etcdtest

const raceEnabled = false

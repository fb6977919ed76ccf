package etcdtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// Serve serves, and never returns, when the process was started by Start as a server; otherwise
// it returns at once. Main calls it; so does the server binary the tests build under the race
// detector.
func Serve() {
	if spec, ok := os.LookupEnv(serveEnv); ok {
		serve(spec)
	}
}

var server struct {
	once sync.Once
	path string // the server binary built without the race detector; "" to run the test binary
	dir  string
}

// serverCommand returns the program and arguments that start a server. Under the race detector
// it is a server built once, without the detector, by `go build` (an etcd instrumented for races
// runs several times slower, and its slowness under a whole package's load failed tests that
// only measured it); when that build fails, and otherwise, the test binary itself, whose Main
// serves. The arguments of the test binary run no test, so that a package whose TestMain does
// not call Main starts no tests recursively: its child exits at once, and Start says why.
func serverCommand() (string, []string, error) {
	if raceEnabled {
		server.once.Do(func() {
			dir, err := os.MkdirTemp("", "etcdtest-server-")
			if err != nil {
				return
			}
			out := filepath.Join(dir, "server")
			goTool, err := exec.LookPath("go")
			if err != nil {
				goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
			}
			cmd := exec.Command(goTool, "build", "-o", out, "github.com/leasehold/leasehold/backend/etcd/internal/etcdtest/server")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			// In this package's own directory, so that the build finds the module wherever the
			// test binary runs (go test runs it in its package's directory; a binary built with
			// -c may run anywhere).
			if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
				cmd.Dir = filepath.Dir(file)
			}
			if cmd.Run() == nil {
				server.path, server.dir = out, dir
			} else {
				os.RemoveAll(dir)
			}
		})
		if server.path != "" {
			return server.path, nil, nil
		}
	}
	exe, err := os.Executable()
	return exe, []string{"-test.run=^$", "-test.bench=^$"}, err
}

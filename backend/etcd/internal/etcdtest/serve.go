package etcdtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/embed"
)

// serveEnv names the environment variable that makes Main serve: its value is the spec.
const serveEnv = "LEASEHOLD_ETCDTEST_SERVE"

// readyLine is what a server writes to fd 3 once it is ready.
const readyLine = "ready\n"

// spec is what a server process is told by its parent.
type spec struct {
	Dir    string // holds data/ and etcd.log
	Client int    // the client port
	Peer   int    // the peer port
}

// serve runs an etcd server as spec says, until it is killed, and never returns. It exits when
// its standard input reaches end of file: the parent is gone.
func serve(raw string) {
	var sp spec
	if err := json.Unmarshal([]byte(raw), &sp); err != nil {
		fatal(fmt.Errorf("%s: %w", serveEnv, err))
	}
	go func() {
		io.Copy(io.Discard, os.Stdin)
		fmt.Fprintln(os.Stderr, "etcdtest: standard input closed: the test binary is gone")
		os.Exit(3)
	}()

	e, err := embed.StartEtcd(config(sp))
	if err != nil {
		fatal(err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		fatal(err)
	}
	ready := os.NewFile(3, "ready")
	if _, err := ready.WriteString(readyLine); err != nil {
		fatal(err)
	}
	ready.Close()
	fatal(<-e.Err())
}

// config returns the embedded server's configuration: the package doc says why each setting.
func config(sp spec) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = filepath.Join(sp.Dir, "data")
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", sp.Client)}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", sp.Peer)}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "etcdtest"
	cfg.TickMs = 50      // heartbeat interval
	cfg.ElectionMs = 500 // minimum lease TTL ceil(1.5 × 500 ms) = 1 s
	cfg.QuotaBackendBytes = 256 << 20
	cfg.AutoCompactionRetention = "0" // off
	cfg.UnsafeNoFsync = true
	cfg.EnableGRPCGateway = false
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{filepath.Join(sp.Dir, "etcd.log")}
	return cfg
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "etcdtest: server: %v\n", err)
	os.Exit(1)
}

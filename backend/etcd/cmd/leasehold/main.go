// Command leasehold is Leasehold's command-line tool with the etcd driver: the command of
// github.com/leasehold/leasehold/cmd/leasehold, whose run, inspect and elect here also take
// -etcd URL (several: endpoints of one cluster, repeated or comma-separated) and -etcd-prefix.
//
//	go install github.com/leasehold/leasehold/backend/etcd/cmd/leasehold@latest
//	leasehold run -etcd http://10.0.0.1:2379,http://10.0.0.2:2379 -key nightly -- ./backup.sh
//
// It is a binary of its own because etcd's client, gRPC and protobuf are required by this module
// (backend/etcd) only, never by Leasehold's. The command itself is package internal/cli, which
// this module may import: Go's internal rule goes by import path.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/grpclog"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/cli"
)

func init() {
	// gRPC logs its connection errors to stderr itself; the command reports a failure once, in
	// one line (as it quiets go-redis).
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
}

func main() { os.Exit(cli.Main(etcdBackend())) }

// etcdBackend is -etcd and -etcd-prefix for run, inspect and elect.
func etcdBackend() cli.Backend {
	var prefix string // -etcd-prefix of the command line
	return cli.Backend{
		Name: "etcd",
		Usage: "etcd cluster: an endpoint `URL` (http://host:2379, https:// for TLS, unix:///path) or\n" +
			"host:port; the client talks to any member that answers",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&prefix, "etcd-prefix", etcd.DefaultPrefix, "prefix of every etcd key Leasehold uses (etcd.WithPrefix); clients sharing a key\n"+
				"must use the same prefix. Not empty")
		},
		Check: func(endpoints []string) error {
			if prefix == "" {
				return errors.New(`-etcd-prefix "": must not be empty`)
			}
			for _, e := range endpoints {
				if err := checkEndpoint(e); err != nil {
					return fmt.Errorf("-etcd %q: %v", e, err)
				}
			}
			return nil
		},
		Open: func(ctx context.Context, endpoints []string) (core.Store, func() error, error) {
			client, err := clientv3.New(clientv3.Config{
				Endpoints: endpoints,
				Logger:    zap.NewNop(), // the command says what failed, in one line
			})
			if err != nil {
				return nil, nil, err
			}
			// clientv3.New dials in the background: one read within ctx (the command's 3s, ended
			// sooner if no endpoint accepts a connection) tells now whether the cluster answers.
			if _, err := client.Get(ctx, prefix, clientv3.WithCountOnly()); err != nil {
				client.Close()
				return nil, nil, err
			}
			s, err := etcd.New(client, etcd.WithPrefix(prefix))
			if err != nil {
				client.Close()
				return nil, nil, err
			}
			return s, func() error { return errors.Join(s.Close(), client.Close()) }, nil
		},
	}
}

// checkEndpoint returns an error if e is not an endpoint etcd's client dials: an http, https,
// unix or unixs URL, or host:port.
func checkEndpoint(e string) error {
	scheme, _, ok := strings.Cut(e, "://")
	if !ok {
		if _, port, err := net.SplitHostPort(e); err != nil || port == "" {
			return errors.New("neither a URL (http://host:2379) nor host:port")
		}
		return nil
	}
	u, err := url.Parse(e)
	switch {
	case err != nil:
		return err
	case scheme != "http" && scheme != "https" && scheme != "unix" && scheme != "unixs":
		return fmt.Errorf("scheme %q: http, https, unix or unixs", scheme)
	case (scheme == "http" || scheme == "https") && u.Port() == "":
		return errors.New("no port (etcd's client port is 2379)")
	}
	return nil
}

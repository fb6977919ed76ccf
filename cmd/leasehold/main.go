// Command leasehold is Leasehold's command-line tool.
//
//	leasehold demo [flags]                          workers share a Semaphore and a Mutex in memory
//	leasehold run -redis URL -key K [flags] -- cmd  run cmd while holding a lease
//	leasehold run -postgres URL -key K -- cmd       the same, on PostgreSQL (so too inspect, elect)
//	leasehold inspect -redis URL [flags] KEY        show who holds KEY and who waits
//	leasehold elect -redis URL KEY VALUE -- cmd     run cmd while leading an election on KEY
//	leasehold elect -redis URL -observe KEY         print each change of KEY's leader
//	leasehold version                               the version and commit it was built from
//
// Run `leasehold --help` or `leasehold demo --help` for details. The command is package
// internal/cli, so that the etcd build (backend/etcd/cmd/leasehold) can be the same command.
package main

import (
	"os"

	"github.com/leasehold/leasehold/internal/cli"
)

func main() { os.Exit(cli.Main()) }

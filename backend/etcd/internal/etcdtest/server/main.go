// Command server is the etcd server of package etcdtest's tests, built without the race
// detector when the tests run under it: see etcdtest's package doc.
package main

import (
	"fmt"
	"os"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
)

func main() {
	etcdtest.Serve()
	fmt.Fprintln(os.Stderr, "server: started without its spec: only etcdtest starts it")
	os.Exit(2)
}

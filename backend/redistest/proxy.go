package redistest

import (
	"testing"

	"github.com/leasehold/leasehold/backend/internal/faultproxy"
)

// Proxy is a TCP proxy on loopback between clients and a server, for injecting network faults:
// latency, connections cut, traffic held back (a partition), and healing. Clients dial Addr. A
// Proxy is safe for concurrent use; it is closed, with every connection, when the test ends.
type Proxy = faultproxy.Proxy

// StartProxy starts a proxy to target.
func StartProxy(t testing.TB, target string) *Proxy { return faultproxy.Start(t, target) }

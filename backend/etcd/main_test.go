package etcd_test

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) {
	// The parallel tests mostly wait (for etcd's answers, for TTLs): unless -parallel says
	// otherwise, more of them run at once than the machine has CPUs.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "8")
	}
	etcdtest.Main(m)
}

// uniqueKey is a key of the test's own, on a server other tests share.
func uniqueKey(t testing.TB) string {
	var b [6]byte
	rand.Read(b[:])
	return t.Name() + ":" + hex.EncodeToString(b[:])
}

// newStore returns a Store with a client of its own on the package's shared server, closed when
// the test ends.
func newStore(t testing.TB, opts ...etcd.Option) *etcd.Store {
	return storeOn(t, etcdtest.Shared(t), opts...)
}

// storeOn returns a Store with a client of its own on srv (through endpoints, when given).
func storeOn(t testing.TB, srv *etcdtest.Server, opts ...etcd.Option) *etcd.Store {
	t.Helper()
	s, err := etcd.New(srv.Client(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// resolution is how late an etcd lease may end after the TTL asked: the TTL rounded up to whole
// seconds, then up to half a second more until etcd's next look for expired leases.
const resolution = 1500 * time.Millisecond

type harness struct{}

func (harness) NewStore(t *testing.T) core.Store { return newStore(t) }
func (harness) Advance(time.Duration) bool       { return false }

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, harness{}, conformance.WithResolution(resolution), conformance.WithSoak(testenv.Soak()))
}

// etcdClient returns a client of the package's shared server, for a test that looks at or
// changes records and leases behind the Stores' backs.
func etcdClient(t testing.TB) *clientv3.Client { return etcdtest.Shared(t).Client(t) }

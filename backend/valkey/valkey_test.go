package valkey_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	vk "github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
)

// valkey-go's cluster client leaves a topology refresh asleep for a few seconds after Close;
// it is the library's, not ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"))
}

// newStore returns a Store over a new client to addrs, both closed when t ends.
func newStore(t *testing.T, addrs ...string) *valkey.Store {
	t.Helper()
	client, err := vk.NewClient(vk.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := valkey.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		client.Close()
	})
	return s
}

type miniHarness struct {
	m   *miniredis.Miniredis
	now time.Time
}

func (h *miniHarness) NewStore(t *testing.T) core.Store { return newStore(t, h.m.Addr()) }

func (h *miniHarness) Advance(d time.Duration) bool {
	h.now = h.now.Add(d)
	h.m.SetTime(h.now)
	h.m.FastForward(d)
	return true
}

func TestConformanceMiniredis(t *testing.T) {
	h := &miniHarness{m: miniredis.RunT(t), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	h.m.SetTime(h.now)
	conformance.Run(t, h)
}

type realHarness struct{ addrs []string }

func (h realHarness) NewStore(t *testing.T) core.Store { return newStore(t, h.addrs...) }
func (realHarness) Advance(time.Duration) bool         { return false }

func TestConformanceRedisServer(t *testing.T) {
	conformance.Run(t, realHarness{[]string{redistest.StartServer(t).Addr}})
}

func TestConformanceRedisCluster(t *testing.T) {
	conformance.Run(t, realHarness{redistest.StartCluster(t, 3)})
}

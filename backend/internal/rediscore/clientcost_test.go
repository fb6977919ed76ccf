package rediscore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/primitives"
)

// grantingClient answers every script as an uncontended acquire and release would, with no
// server: what is left of a pair's cost is the client's own.
type grantingClient struct{ fence int64 }

func (c *grantingClient) Do(ctx context.Context, call rediscore.Call) (any, error) {
	c.fence++
	if strings.HasSuffix(call.Args[1].(string), "_acquire") {
		return c.fence, nil // a grant: its fence
	}
	return int64(1), nil // a release that granted nobody: the permits it freed
}

func (c *grantingClient) LoadLibrary(context.Context, string) []error { return nil }
func (c *grantingClient) ErrorReply(error) (string, bool)             { return "", false }
func (c *grantingClient) Unsent(error) bool                           { return false }

func (c *grantingClient) Listen(ctx context.Context, l rediscore.Listener) (rediscore.PubSub, func()) {
	panic("no waiter in an uncontended pair")
}

// BenchmarkClientPath: a Mutex Acquire and Release over a Store whose client answers at once:
// the CPU and allocations the library adds to each uncontended pair on the client, beside the
// Redis client's own and the round trips.
func BenchmarkClientPath(b *testing.B) {
	s, err := rediscore.New("fake", 1, &grantingClient{})
	if err != nil {
		b.Fatal(err)
	}
	m, _ := primitives.NewMutex(s, "k")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := m.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

package goredis_test

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // or a ClusterClient, a FailoverClient
	store, err := goredis.New(rdb, goredis.WithPrefix("myapp:"))
	if err != nil {
		panic(err)
	}
	defer store.Close() // the Store's subscription; rdb stays open

	mu, _ := primitives.NewMutex(store, "report:daily")
	_ = mu.Do(context.Background(), func(ctx context.Context, lease core.Lease) error {
		return nil // the work, with lease.Fence() sent along with each write
	})
}

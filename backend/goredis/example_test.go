package goredis_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/primitives"
)

// A mutex on Redis through go-redis: the program of the README's first screen, function for
// function (the README's func main is this Example's body). It needs a redis-server on
// 127.0.0.1:6379, so it has no Output and is compiled, not run, by go test.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, err := goredis.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // ends the Store's subscription; rdb stays open

	mu, err := primitives.NewMutex(store, "report:daily", primitives.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	err = mu.Do(ctx, func(ctx context.Context, lease primitives.Lease) error {
		// Refreshed in the background; ctx is canceled if the lease is lost.
		log.Printf("holding %s with fence %d", lease.Key(), lease.Fence())
		return nil // send lease.Fence() with each write, so the resource refuses a stale holder
	})
	if errors.Is(err, primitives.ErrNotAcquired) {
		log.Fatal("someone else is writing the report")
	}
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // or a ClusterClient, a FailoverClient
	store, err := goredis.New(rdb, goredis.WithPrefix("myapp:"))
	if err != nil {
		panic(err)
	}
	defer store.Close() // the Store's subscription; rdb stays open

	mu, _ := primitives.NewMutex(store, "report:daily")
	_ = mu.Do(context.Background(), func(ctx context.Context, lease primitives.Lease) error {
		return nil // the work, with lease.Fence() sent along with each write
	})
}

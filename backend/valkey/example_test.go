package valkey_test

import (
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/primitives"
)

func ExampleNew() {
	client, err := vk.NewClient(vk.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	store, err := valkey.New(client)
	if err != nil {
		panic(err)
	}
	defer store.Close()

	sem, _ := primitives.NewSemaphore(store, "gpu-pool", 4)
	_ = sem
}

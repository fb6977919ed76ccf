package httpfence_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/primitives/httpfence"
)

func ExampleMiddleware() {
	store := memory.New() // the holders' store, e.g. goredis.New(client)
	records := memory.New()

	// The resource's server refuses a write whose fence is older than one it accepted.
	fenced, err := httpfence.Middleware(records.Fenced, func(r *http.Request) string { return r.URL.Path })
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(fenced(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fence, _ := httpfence.FromContext(r.Context())
		fmt.Println("write accepted with fence", fence > 0)
	})))
	defer srv.Close()

	// A holder sends its lease's fence with every write.
	m, _ := primitives.NewMutex(store, "report")
	lease, err := m.Acquire(context.Background())
	if err != nil {
		panic(err)
	}
	defer lease.Release(context.Background())
	client := &http.Client{Transport: httpfence.Transport(nil, lease)}
	resp, err := client.Post(srv.URL+"/report", "text/plain", strings.NewReader("totals"))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	// Output:
	// write accepted with fence true
	// 200 OK
}

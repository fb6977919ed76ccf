package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/primitives/httplimit"
)

func ExampleNew() {
	store := memory.New() // every server process shares one store, e.g. goredis.New(client)
	limit, err := httplimit.New(store, 100, httplimit.WithKey(func(r *http.Request) string { return r.URL.Path }))
	if err != nil {
		panic(err)
	}
	handler := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello")
	}))

	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest("GET", "/report", nil))
	fmt.Println(rec.Code, rec.Body.String())
	// Output: 200 hello
}

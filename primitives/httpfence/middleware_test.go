package httpfence_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/primitives/httpfence"
)

// TestMiddlewareReadsOnlyAPlainDecimalFence: a sign, inner or surrounding spaces, a hexadecimal
// or an exponent get 400 and reach no handler; leading zeros are the number they write; the
// largest fence the stores take, 2^63 − 1, passes, and one above it is refused with 400.
func TestMiddlewareReadsOnlyAPlainDecimalFence(t *testing.T) {
	store := memory.New()
	fenced, err := httpfence.Middleware(store.Fenced, func(r *http.Request) string { return r.URL.Path })
	if err != nil {
		t.Fatal(err)
	}
	var l ledger
	h := fenced(&l)
	for _, step := range []struct {
		fence, body string
		want        int
	}{
		{"+9", "a", http.StatusBadRequest}, {" 9", "b", http.StatusBadRequest}, {"9 ", "c", http.StatusBadRequest},
		{"9 9", "d", http.StatusBadRequest}, {"0x9", "e", http.StatusBadRequest}, {"9e0", "f", http.StatusBadRequest},
		{"1_0", "g", http.StatusBadRequest}, {"00", "h", http.StatusBadRequest},
		{"0009", "i", http.StatusOK}, {"8", "j", http.StatusConflict}, {"9", "k", http.StatusOK},
		{"9223372036854775808", "l", http.StatusBadRequest}, {"9223372036854775807", "m", http.StatusOK},
		{"9223372036854775806", "n", http.StatusConflict},
	} {
		if got := serve(t, h, step.fence, step.body); got != step.want {
			t.Errorf("fence %q: status %d, want %d", step.fence, got, step.want)
		}
	}
	if got, want := strings.Join(l.log, " "), "i@9 k@9 m@9223372036854775807"; got != want {
		t.Errorf("the handler saw %q, want %q", got, want)
	}
}

// TestHandlerPanicLeavesTheGuardUsable: a handler that panics inside memory.Store.Fenced's guard
// lets the panic through (net/http recovers it), unlocks the store's fenced writes and records
// nothing: the next request, with a lower fence, is served.
func TestHandlerPanicLeavesTheGuardUsable(t *testing.T) {
	store := memory.New()
	fenced, err := httpfence.Middleware(store.Fenced, func(r *http.Request) string { return r.URL.Path })
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Errorf("the handler's panic did not come through the middleware")
			}
		}()
		serve(t, fenced(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) })), "9", "a")
	}()
	var l ledger
	if got := serve(t, fenced(&l), "5", "b"); got != http.StatusOK || strings.Join(l.log, " ") != "b@5" {
		t.Errorf("after a handler's panic: status %d, handler saw %v; want 200 and b@5", got, l.log)
	}
}
